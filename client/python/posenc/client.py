"""posenc.Client: the PositionalEncoding service with numpy arrays in and out."""
import collections

import grpc
import numpy as np
from google.protobuf import descriptor_pb2, descriptor_pool, message_factory

from posenc.errors import PosencError, invalid
from posenc.schemes import positions_proto, scheme_field
from posenc.shm import ShmTensor, SharedMemoryRegion
from posenc.tensors import to_numpy, to_tensor, wire_dtype
from posenc.v1 import posenc_pb2 as pb
from posenc.v1 import posenc_pb2_grpc as pb_grpc

# The server's default --max_message_bytes; gRPC's own default (4 MiB) is far smaller.
DEFAULT_MAX_MESSAGE_BYTES = 64 << 20


def _oneof_scheme(message):
    """The members of a request's `oneof scheme`, from the generated proto: one list."""
    return tuple(f.name for f in message.DESCRIPTOR.oneofs_by_name["scheme"].fields)


_ENCODE_SCHEMES = _oneof_scheme(pb.EncodeRequest)
_BIAS_SCHEMES = _oneof_scheme(pb.BiasRequest)
_TABLE_SCHEMES = _oneof_scheme(pb.TableRequest)
_GRAPH_ENCODINGS = tuple(v.name.lower() for v in pb.GraphEncoding.DESCRIPTOR.values)

SchemeList = collections.namedtuple("SchemeList", "schemes dtypes tables version")
GraphResult = collections.namedtuple("GraphResult", "vectors eigenvalues")


def _health_messages():
    """grpc.health.v1 request/response classes in a private pool, so they never clash with
    a grpc_health package the application may also import."""
    f = descriptor_pb2.FileDescriptorProto(name="posenc_private/health.proto",
                                           package="grpc.health.v1", syntax="proto3")
    field = descriptor_pb2.FieldDescriptorProto
    f.message_type.add(name="HealthCheckRequest").field.add(
        name="service", number=1, type=field.TYPE_STRING, label=field.LABEL_OPTIONAL)
    response = f.message_type.add(name="HealthCheckResponse")
    status = response.enum_type.add(name="ServingStatus")
    for number, name in enumerate(("UNKNOWN", "SERVING", "NOT_SERVING", "SERVICE_UNKNOWN")):
        status.value.add(name=name, number=number)
    response.field.add(name="status", number=1, type=field.TYPE_ENUM, label=field.LABEL_OPTIONAL,
                       type_name=".grpc.health.v1.HealthCheckResponse.ServingStatus")
    pool = descriptor_pool.DescriptorPool()
    pool.Add(f)
    factory = message_factory.MessageFactory(pool)
    get = lambda name: factory.GetPrototype(pool.FindMessageTypeByName(name))  # noqa: E731
    return get("grpc.health.v1.HealthCheckRequest"), get("grpc.health.v1.HealthCheckResponse")


_HealthRequest, _HealthResponse = _health_messages()


def _message_error(response):
    """The PosencError an EncodeStream message carries in EncodeResponse.error."""
    code = next((c for c in grpc.StatusCode if c.value[0] == response.error.code),
                grpc.StatusCode.UNKNOWN)
    return PosencError(code, response.error.message, response.request_id or None)


def _pem(value):
    """PEM bytes from bytes, or from a file path."""
    if value is None or isinstance(value, bytes):
        return value
    with open(value, "rb") as f:
        return f.read()


def _tensor(value, dtype=None):
    if isinstance(value, ShmTensor):
        return value.proto()
    return to_tensor(value, dtype)


def _ref(value):
    if value is None or isinstance(value, pb.SharedMemoryRef):
        return value
    if isinstance(value, ShmTensor):
        return value.ref()
    raise invalid("an output_shm must be a ShmTensor or a SharedMemoryRef")


class Client:
    """One channel to a posenc server; thread-safe, as gRPC channels are.

    target: "host:port", "dns:///name:port" or "unix:/path".
    TLS: tls=True (system roots), or root_certificates / private_key / certificate_chain
    (PEM bytes or file paths; a key and chain give mutual TLS), server_name to override the
    name expected in the server's certificate, or any grpc.ChannelCredentials as credentials.
    max_message_bytes: the largest message sent or received (both ways); keep it equal to
    the server's --max_message_bytes. timeout: seconds per unary call (None: no deadline).
    options: more channel arguments, e.g. [("grpc.lb_policy_name", "round_robin")].
    """

    def __init__(self, target="127.0.0.1:50051", *, tls=False, root_certificates=None,
                 private_key=None, certificate_chain=None, server_name=None, credentials=None,
                 max_message_bytes=DEFAULT_MAX_MESSAGE_BYTES, timeout=30.0, options=()):
        args = [("grpc.max_send_message_length", int(max_message_bytes)),
                ("grpc.max_receive_message_length", int(max_message_bytes))]
        if server_name:
            args.append(("grpc.ssl_target_name_override", server_name))
        args.extend(options)
        if credentials is None and (tls or root_certificates or certificate_chain):
            credentials = grpc.ssl_channel_credentials(
                _pem(root_certificates), _pem(private_key), _pem(certificate_chain))
        if credentials is not None:
            self._channel = grpc.secure_channel(target, credentials, args)
        else:
            self._channel = grpc.insecure_channel(target, args)
        self.target, self.timeout = target, timeout
        self._stub = pb_grpc.PositionalEncodingStub(self._channel)
        self._health = self._channel.unary_unary(
            "/grpc.health.v1.Health/Check",
            request_serializer=_HealthRequest.SerializeToString,
            response_deserializer=_HealthResponse.FromString)
        self._regions = {}

    # -- plumbing ---------------------------------------------------------------------------
    def _call(self, rpc, request, timeout, request_id=None):
        try:
            return rpc(request, timeout=self.timeout if timeout is None else timeout)
        except grpc.RpcError as err:
            raise PosencError.from_rpc_error(err, request_id) from None

    def _output(self, tensor):
        """An inline tensor as numpy; one by reference as a view of the mapped region."""
        if not tensor.HasField("shm"):
            return to_numpy(tensor)
        out = ShmTensor(tensor.shm.region, tensor.shape, tensor.dtype, tensor.shm.offset,
                        region=self._regions.get(tensor.shm.region))
        return out.numpy() if out.region is not None else out

    def _encode_request(self, x, scheme, positions=None, key=None, request_id=None, *,
                        dtype=None, output_shm=None, key_output_shm=None):
        name, msg = scheme_field(scheme, _ENCODE_SCHEMES)
        request = pb.EncodeRequest(request_id=request_id or "", input=_tensor(x, dtype))
        getattr(request, name).CopyFrom(msg)
        if key is not None:
            request.key.CopyFrom(_tensor(key, dtype))
        if positions is not None:
            request.positions.CopyFrom(positions_proto(positions))
        if output_shm is not None:
            request.output_shm.CopyFrom(_ref(output_shm))
        if key_output_shm is not None:
            request.key_output_shm.CopyFrom(_ref(key_output_shm))
        return request

    def _encode_result(self, response, with_key):
        out = self._output(response.output)
        return (out, self._output(response.key_output)) if with_key else out

    # -- calls ------------------------------------------------------------------------------
    def encode(self, x, scheme, positions=None, key=None, request_id=None, *, dtype=None,
               output_shm=None, key_output_shm=None, timeout=None):
        """Applies `scheme` to `x` (a numpy array, or a ShmTensor). Returns the output array,
        or (output, key_output) when `key` is given. positions: an int offset, a dict of
        offsets/ids/values, or a posenc.pb.Positions. dtype ("float32", "float16",
        "bfloat16"; x's own by default) is the wire type of x and key: a float32 (or float64)
        array is converted to it, bfloat16 rounded to nearest-even as
        posenc.tensors.to_bfloat16 does, and the output comes back in it. uint16 arrays are
        bfloat16 bit patterns and travel unchanged."""
        request = self._encode_request(x, scheme, positions, key, request_id, dtype=dtype,
                                       output_shm=output_shm, key_output_shm=key_output_shm)
        response = self._call(self._stub.Encode, request, timeout, request_id)
        return self._encode_result(response, key is not None)

    def encode_stream(self, requests, timeout=None):
        """EncodeStream over one call: `requests` yields (x, scheme[, positions[, key]])
        tuples or dicts of encode()'s arguments; results come back in order, lazily. A
        message the server refused yields a PosencError (not raised) in its place and the
        stream goes on; an error that ends the stream is raised."""
        with_key, failure = collections.deque(), []

        def generate():
            for item in requests:
                try:
                    kwargs = dict(item) if isinstance(item, dict) else None
                    request = (self._encode_request(**kwargs) if kwargs is not None
                               else self._encode_request(*item))
                except (PosencError, TypeError) as err:  # stops sending; raised after
                    failure.append(err if isinstance(err, PosencError) else invalid(str(err)))
                    return
                with_key.append(request.HasField("key"))
                yield request

        try:
            for response in self._stub.EncodeStream(generate(), timeout=timeout):
                key = with_key.popleft()
                yield (_message_error(response) if response.HasField("error")
                       else self._encode_result(response, key))
        except grpc.RpcError as err:
            raise PosencError.from_rpc_error(err) from None
        if failure:
            raise failure[0]

    def attention_bias(self, scheme, query_length, key_length, query_offset=None,
                       scores=None, request_id=None, *, query=None, output_shm=None,
                       timeout=None):
        """ALiBi or T5 bias [heads, q, k] (T5 without a table: INT32 buckets [q, k]), or
        scores [batch, heads, q, k] + bias when scores are given. Shaw: INT32 indices [q, k],
        embeddings [q, k, d] with a table, or with a table and `query` [batch, heads, q, d]
        the term sum_d query * table[index] ([batch, heads, q, k], added to scores when
        given). DeBERTa: INT32 relative positions [q, k]."""
        name, msg = scheme_field(scheme, _BIAS_SCHEMES)
        request = pb.BiasRequest(request_id=request_id or "", query_length=query_length,
                                 key_length=key_length)
        getattr(request, name).CopyFrom(msg)
        if query_offset is not None:
            request.query_offset = query_offset
        if scores is not None:
            request.scores.CopyFrom(_tensor(scores))
        if query is not None:
            request.query.CopyFrom(_tensor(query))
        if output_shm is not None:
            request.output_shm.CopyFrom(_ref(output_shm))
        return self._output(self._call(self._stub.AttentionBias, request, timeout,
                                       request_id).output)

    def table(self, scheme, length, dim, dtype="float32", rows_per_chunk=None, timeout=None,
              *, first_position=None, position_step=None, clamp_position=None):
        """GetTable's rows, every chunk concatenated: [length, dim] sinusoidal,
        [length, 2, dim/2] rope cos/sin. Row r is position first_position + r *
        position_step (defaults 0 and 1), clamped to [-clamp_position, clamp_position] when
        given: Transformer-XL's pos_emb is first_position=klen-1, position_step=-1,
        clamp_position=clamp_len with a CONCATENATED sinusoidal."""
        name, msg = scheme_field(scheme, _TABLE_SCHEMES)
        request = pb.TableRequest(length=length, dim=dim, dtype=wire_dtype(dtype),
                                  rows_per_chunk=rows_per_chunk or 0)
        for field, value in (("first_position", first_position),
                             ("position_step", position_step),
                             ("clamp_position", clamp_position)):
            if value is not None:
                setattr(request, field, int(value))
        getattr(request, name).CopyFrom(msg)
        first = 0 if first_position is None else int(first_position)
        step = 1 if position_step is None else int(position_step)

        def position(r):
            p = first + r * step
            if clamp_position is not None:
                p = max(-int(clamp_position), min(int(clamp_position), p))
            return p

        chunks, rows_seen = [], 0
        try:
            for chunk in self._stub.GetTable(request, timeout=timeout):
                if chunk.first_position != position(rows_seen):
                    raise invalid("table chunk starts at position %d; expected %d"
                                  % (chunk.first_position, position(rows_seen)))
                rows = to_numpy(chunk.rows)
                chunks.append(rows)
                rows_seen += rows.shape[0]
        except grpc.RpcError as err:
            raise PosencError.from_rpc_error(err) from None
        return np.concatenate(chunks) if len(chunks) != 1 else chunks[0]

    def graph_encode(self, num_nodes, edges=(), k=0, normalized=False, features=None,
                     request_id=None, timeout=None, *, encoding="laplacian", walk_length=None,
                     anchors=None, parents=None, max_depth=None, max_children=None,
                     table=None, depth_decay=None):
        """A graph encoding and (Laplacian) the eigenvalues; with features [n, d] the
        encoding follows each node's features, in their dtype. edges: pairs (u, v), an
        [E, 2] array, or a flat u0, v0, u1, v1 list.
          laplacian      eigenvectors 2..k+1 [n, k] (k, normalized)
          random_walk    (P^s)[i][i], s = 1..walk_length [n, walk_length] FLOAT32
          shortest_path  hops to each of `anchors` [n, len(anchors)] INT32, -1 unreachable
          tree           from `parents` (-1 for a root; no edges): the one-hot stack
                         [n, max_depth * max_children], or with `table` [n, d]"""
        if encoding not in _GRAPH_ENCODINGS:
            raise invalid("encoding %r is not one of %s" % (encoding, ", ".join(_GRAPH_ENCODINGS)))
        flat = np.asarray(edges, dtype=np.int64).reshape(-1).tolist()
        request = pb.GraphRequest(request_id=request_id or "", num_nodes=num_nodes,
                                  edges=flat, k=k, normalized=normalized,
                                  encoding=pb.GraphEncoding.Value(encoding.upper()))
        if walk_length is not None:
            request.walk_length = walk_length
        if anchors is not None:
            request.anchors.extend(int(a) for a in anchors)
        if parents is not None:
            request.parents.extend(int(p) for p in parents)
        if max_depth is not None:
            request.max_depth = max_depth
        if max_children is not None:
            request.max_children = max_children
        if table is not None:
            request.table = table
        if depth_decay is not None:
            request.depth_decay = depth_decay
        if features is not None:
            request.input.CopyFrom(_tensor(features))
        response = self._call(self._stub.GraphEncode, request, timeout, request_id)
        return GraphResult(to_numpy(response.output), list(response.eigenvalues))

    def list_schemes(self, timeout=None):
        """SchemeList(schemes, dtypes (names), tables ({name, shape, dtype}), version)."""
        r = self._call(self._stub.ListSchemes, pb.ListSchemesRequest(), timeout)
        tables = [{"name": t.name, "shape": list(t.shape), "dtype": pb.DType.Name(t.dtype)}
                  for t in r.tables]
        return SchemeList(list(r.schemes), [pb.DType.Name(d) for d in r.dtypes], tables,
                          r.version)

    def health(self, service="", timeout=None):
        """grpc.health.v1 Check: "SERVING", "NOT_SERVING", ... ("liveness" for liveness)."""
        response = self._call(self._health, _HealthRequest(service=service), timeout)
        return _HealthResponse.DESCRIPTOR.enum_types_by_name["ServingStatus"].values_by_number[
            response.status].name

    # -- shared memory ----------------------------------------------------------------------
    def register_shared_memory(self, name, region, offset=0, byte_size=None, timeout=None):
        """Registers a SharedMemoryRegion (or a shm key string with byte_size) under `name`;
        outputs written there come back as numpy views of the region."""
        if isinstance(region, SharedMemoryRegion):
            key = region.key
            byte_size = region.byte_size - offset if byte_size is None else byte_size
        else:
            key = str(region)
            if byte_size is None:
                raise invalid("byte_size is required when registering a key")
        request = pb.RegisterSharedMemoryRequest(name=name, key=key, offset=offset,
                                                 byte_size=byte_size)
        self._call(self._stub.RegisterSharedMemory, request, timeout)
        if isinstance(region, SharedMemoryRegion):
            region.name = name
            self._regions[name] = region

    def unregister_shared_memory(self, name="", timeout=None):
        """Forgets one region, or every region with name ""."""
        self._call(self._stub.UnregisterSharedMemory,
                   pb.UnregisterSharedMemoryRequest(name=name), timeout)
        for n in ([name] if name else list(self._regions)):
            region = self._regions.pop(n, None)
            if region is not None:
                region.name = None

    def shared_memory_status(self, name="", timeout=None):
        """The registered regions: [{name, offset, byte_size, in_use}]."""
        r = self._call(self._stub.SharedMemoryStatus, pb.SharedMemoryStatusRequest(name=name),
                       timeout)
        return [{"name": g.name, "offset": g.offset, "byte_size": g.byte_size,
                 "in_use": g.in_use} for g in r.regions]

    # Short names.
    unregister = unregister_shared_memory
    shm_status = shared_memory_status

    def close(self):
        self._channel.close()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()
