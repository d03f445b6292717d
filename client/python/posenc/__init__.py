"""posenc: a Python client for the posenc positional-encoding service.

    import numpy as np, posenc
    with posenc.Client("127.0.0.1:50051") as client:
        y = client.encode(np.zeros((1, 8, 64), np.float32), posenc.Sinusoidal())
        q = client.encode(q, posenc.Rope.from_hf_config("config.json"), positions=100)

Needs grpcio, protobuf and numpy (Debian: python3-grpcio, python3-numpy). Install it with
`pip install ./client/python`, which generates the posenc.v1 stubs (see pyproject.toml); or
use the build tree's copy (`ninja -C build posenc_python`, PYTHONPATH=build/client/python).
"""
import os as _os

_HERE = _os.path.dirname(_os.path.abspath(__file__))


def _find_stubs():
    """Adds the folder holding v1/posenc_pb2.py to this package's path.

    The build copies this package next to its generated stubs (build/client/python/posenc);
    run from the source tree, the stubs are looked for in $POSENC_PYTHON_STUBS, then in
    <repo>/build/client/python/posenc."""
    if _os.path.exists(_os.path.join(_HERE, "v1", "posenc_pb2.py")):
        return
    repo = _os.path.dirname(_os.path.dirname(_os.path.dirname(_HERE)))
    candidates = [_os.environ.get("POSENC_PYTHON_STUBS", ""),
                  _os.path.join(repo, "build", "client", "python", "posenc")]
    for folder in candidates:
        if folder and _os.path.exists(_os.path.join(folder, "v1", "posenc_pb2.py")):
            __path__.append(folder)  # noqa: F821 (the package's own __path__)
            return
    raise ImportError("posenc: generated stubs not found; `pip install ./client/python`, or "
                      "`ninja -C build posenc_python` and PYTHONPATH=build/client/python "
                      "(or set POSENC_PYTHON_STUBS to the folder that holds v1/posenc_pb2.py)")


_find_stubs()

from posenc.v1 import posenc_pb2 as pb  # noqa: E402
from posenc.v1 import posenc_pb2_grpc as pb_grpc  # noqa: E402
from posenc.errors import PosencError  # noqa: E402
from posenc.tensors import (bfloat16_dtype, from_bfloat16, to_bfloat16,  # noqa: E402
                            to_numpy, to_tensor)
from posenc.schemes import (Alibi, Continuous, Deberta, Fourier, Hierarchical,  # noqa: E402
                            Learned, Level, MropeSegment, Rope, RopeScaling, Shaw, Sinusoidal,
                            Sinusoidal2D, T5, positions_proto)
from posenc.mrope import mrope_segments  # noqa: E402
from posenc.shm import SharedMemoryRegion, ShmTensor  # noqa: E402
from posenc.client import (DEFAULT_MAX_MESSAGE_BYTES, Client, GraphResult,  # noqa: E402
                           SchemeList)

__all__ = [
    "Alibi", "Client", "Continuous", "DEFAULT_MAX_MESSAGE_BYTES", "Deberta", "Fourier",
    "GraphResult", "Hierarchical", "Learned", "Level", "MropeSegment", "PosencError", "Rope",
    "RopeScaling", "SchemeList", "SharedMemoryRegion", "ShmTensor", "Shaw", "Sinusoidal",
    "Sinusoidal2D", "T5",
    "bfloat16_dtype", "from_bfloat16",
    "mrope_segments", "pb", "pb_grpc", "positions_proto", "to_bfloat16", "to_numpy", "to_tensor",
]
