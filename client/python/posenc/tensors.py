"""numpy arrays to and from posenc.v1.Tensor.

The wire has no unsigned types, so a uint16 array is taken as bfloat16 bit patterns (the
usual way to hold bfloat16 in numpy). Outputs in bfloat16 come back as ml_dtypes.bfloat16
when ml_dtypes is importable, else as uint16 bit patterns; from_bfloat16 widens them.
"""
import numpy as np

from posenc.errors import invalid
from posenc.v1 import posenc_pb2 as pb

try:  # optional: a real numpy bfloat16 dtype
    import ml_dtypes as _ml_dtypes
    _BF16 = np.dtype(_ml_dtypes.bfloat16)
except ImportError:
    _BF16 = None

_TO_WIRE = {
    np.dtype(np.float32): pb.FLOAT32,
    np.dtype(np.float16): pb.FLOAT16,
    np.dtype(np.uint16): pb.BFLOAT16,
    np.dtype(np.int32): pb.INT32,
    np.dtype(np.int64): pb.INT64,
}
if _BF16 is not None:
    _TO_WIRE[_BF16] = pb.BFLOAT16

_FROM_WIRE = {
    pb.FLOAT32: np.dtype("<f4"),
    pb.FLOAT16: np.dtype("<f2"),
    pb.BFLOAT16: _BF16 if _BF16 is not None else np.dtype("<u2"),
    pb.INT32: np.dtype("<i4"),
    pb.INT64: np.dtype("<i8"),
}


def bfloat16_dtype():
    """The numpy dtype bfloat16 outputs have: ml_dtypes.bfloat16, or uint16 without it."""
    return _FROM_WIRE[pb.BFLOAT16]


def wire_dtype(dtype):
    """posenc.v1.DType of a numpy dtype, of a name such as "bfloat16", or of a DType value
    itself (a response tensor's dtype)."""
    if isinstance(dtype, str) and dtype.upper() in pb.DType.keys():
        return pb.DType.Value(dtype.upper())
    if isinstance(dtype, (int, np.integer)) and not isinstance(dtype, bool):
        if int(dtype) not in pb.DType.values():
            raise invalid("dtype %d is not a posenc.v1.DType value" % dtype)
        return int(dtype)
    key = np.dtype(dtype).newbyteorder("=")
    if key not in _TO_WIRE:
        raise invalid("dtype %s has no posenc equivalent; use float32, float16, bfloat16 "
                      "(uint16 bits or ml_dtypes), int32 or int64" % np.dtype(dtype))
    return _TO_WIRE[key]


_ITEMSIZE = {pb.FLOAT32: 4, pb.FLOAT16: 2, pb.BFLOAT16: 2, pb.INT32: 4, pb.INT64: 8}


def _as_wire_values(array, wire):
    """`array` holding `wire`'s values: floating arrays are rounded to a float wire type
    (float16: numpy's astype; bfloat16: to_bfloat16, nearest-even); other arrays keep their
    bytes, so uint16 bit patterns go as bfloat16 or float16 as they are."""
    floating = array.dtype.kind == "f" or (_BF16 is not None and array.dtype == _BF16)
    if not floating or _FROM_WIRE.get(wire) == array.dtype.newbyteorder("="):
        return array
    if wire == pb.BFLOAT16:
        return to_bfloat16(array.astype(np.float32))
    if wire == pb.FLOAT16:
        return array.astype(np.float16)
    if wire == pb.FLOAT32:
        return array.astype(np.float32)
    return array


def to_tensor(array, dtype=None):
    """A Tensor holding `array`'s values (little-endian, C order). `dtype` picks the wire
    type: a floating array (float32, float64, float16) is converted to it when it is
    float32, float16 or bfloat16 (bfloat16 rounds to nearest, ties to even, as
    posenc.tensors.to_bfloat16 does); an integer array keeps its bytes, so a uint16 array
    of bit patterns goes as dtype "bfloat16" or "float16" unchanged. An array whose
    element size does not fit the wire type is refused."""
    array = np.asarray(array)
    wire = wire_dtype(dtype if dtype is not None else array.dtype)
    array = _as_wire_values(array, wire)
    if array.dtype.itemsize != _ITEMSIZE.get(wire, array.dtype.itemsize):
        raise invalid("a %s array cannot travel as %s: convert it first (for bfloat16, "
                      "posenc.tensors.to_bfloat16 gives the uint16 bit patterns)"
                      % (array.dtype, pb.DType.Name(wire)))
    if array.dtype.byteorder == ">":
        array = array.astype(array.dtype.newbyteorder("<"))
    data = np.ascontiguousarray(array).tobytes()
    return pb.Tensor(shape=list(array.shape), dtype=wire, data=data)


def to_numpy(tensor):
    """A read-only array over an inline Tensor's bytes (no copy; .copy() it to write)."""
    if tensor.dtype not in _FROM_WIRE:
        raise invalid("tensor dtype %s is not known to this client" % tensor.dtype)
    if tensor.HasField("shm"):
        raise invalid("tensor is in shared memory region '%s'; read it from the region"
                      % tensor.shm.region)
    dtype = _FROM_WIRE[tensor.dtype]
    expected = int(np.prod(tensor.shape, dtype=np.int64)) * dtype.itemsize
    if len(tensor.data) != expected:
        raise invalid("tensor has %d bytes; shape %s needs %d"
                      % (len(tensor.data), list(tensor.shape), expected))
    return np.frombuffer(tensor.data, dtype=dtype).reshape(tuple(tensor.shape))


def to_bfloat16(array):
    """float32 values rounded to bfloat16 (nearest, ties to even), as uint16 bit patterns."""
    bits = np.ascontiguousarray(array, dtype=np.float32).view(np.uint32)
    rounded = (bits + (0x7FFF + ((bits >> 16) & 1))) >> 16
    nan = np.isnan(np.asarray(array, dtype=np.float32))
    return np.where(nan, (bits >> 16) | 0x40, rounded).astype(np.uint16)


def from_bfloat16(array):
    """float32 values of bfloat16 bit patterns (uint16 or ml_dtypes.bfloat16)."""
    bits = np.ascontiguousarray(array).view(np.uint16).astype(np.uint32)
    return (bits << 16).view(np.float32)
