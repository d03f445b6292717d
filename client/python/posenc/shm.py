"""Shared-memory tensors for same-host clients (the server runs with --shm).

    with posenc.SharedMemoryRegion(1 << 20) as region:       # /dev/shm/posenc_<random>
        client.register_shared_memory("r0", region)
        x = region.write(np.ones((1, 8, 64), np.float32))     # a ShmTensor in the region
        y = client.encode(x, posenc.Sinusoidal())              # written in place: a view

Keys start with "posenc_", the server's default --shm_key_prefix.
"""
import secrets
from multiprocessing import shared_memory

import numpy as np

from posenc.errors import invalid
from posenc.tensors import wire_dtype, _FROM_WIRE
from posenc.v1 import posenc_pb2 as pb

KEY_PREFIX = "posenc_"


class ShmTensor:
    """A tensor by reference: `shape` and `dtype` at `offset` bytes into a registered region.
    `region` is the SharedMemoryRegion when this process has it mapped (for views)."""

    def __init__(self, region_name, shape, dtype, offset=0, region=None):
        self.region_name, self.shape, self.offset = region_name, tuple(shape), int(offset)
        self.wire_dtype = wire_dtype(dtype)
        self.region = region

    @property
    def byte_size(self):
        return int(np.prod(self.shape, dtype=np.int64)) * _FROM_WIRE[self.wire_dtype].itemsize

    def ref(self):
        return pb.SharedMemoryRef(region=self.region_name, offset=self.offset,
                                  byte_size=self.byte_size)

    def proto(self):
        return pb.Tensor(shape=list(self.shape), dtype=self.wire_dtype, shm=self.ref())

    def numpy(self):
        """A writable view of the bytes (needs the mapped region)."""
        if self.region is None:
            raise invalid("region '%s' is not mapped in this process" % self.region_name)
        return self.region.ndarray(self.shape, _FROM_WIRE[self.wire_dtype], self.offset)

    def __repr__(self):
        return "posenc.ShmTensor(%r, %s, %s, offset=%d)" % (
            self.region_name, list(self.shape), pb.DType.Name(self.wire_dtype), self.offset)


class SharedMemoryRegion:
    """A POSIX shared-memory object made (or opened, create=False) with
    multiprocessing.shared_memory. As a context manager it is closed and unlinked on exit."""

    def __init__(self, byte_size, key=None, create=True):
        key = key or KEY_PREFIX + secrets.token_hex(8)
        if not key.lstrip("/").startswith(KEY_PREFIX):
            raise invalid("shared memory key '%s' must start with '%s'" % (key, KEY_PREFIX))
        if create and byte_size < 1:
            raise invalid("shared memory byte_size is %d; it must be >= 1" % byte_size)
        self._shm = shared_memory.SharedMemory(name=key.lstrip("/"), create=create,
                                               size=byte_size if create else 0)
        self.key = self._shm.name
        self.byte_size = self._shm.size
        self.name = None  # set by Client.register_shared_memory

    @property
    def buf(self):
        return self._shm.buf

    def ndarray(self, shape, dtype, offset=0):
        """A writable numpy view of the region's bytes at `offset`."""
        return np.ndarray(shape, dtype=dtype, buffer=self._shm.buf, offset=offset)

    def tensor(self, shape, dtype, offset=0):
        """A ShmTensor of this region (registered first; see Client.register_shared_memory)."""
        if self.name is None:
            raise invalid("region '%s' is not registered with a server" % self.key)
        return ShmTensor(self.name, shape, dtype, offset, region=self)

    def write(self, array, offset=0, dtype=None):
        """Copies `array` in at `offset` and returns its ShmTensor (uint16 = bfloat16)."""
        array = np.ascontiguousarray(array)
        if offset + array.nbytes > self.byte_size:
            raise invalid("%d bytes at offset %d do not fit the region's %d"
                          % (array.nbytes, offset, self.byte_size))
        out = self.tensor(array.shape, dtype if dtype is not None else array.dtype, offset)
        self.ndarray(array.shape, array.dtype, offset)[...] = array
        return out

    def close(self):
        self._shm.close()

    def unlink(self):
        self._shm.unlink()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()
        self.unlink()
