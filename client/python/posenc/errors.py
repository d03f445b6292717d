"""The one exception type the posenc client raises."""
import grpc


class PosencError(Exception):
    """A failed call or a request the client refused to send.

    .code is a grpc.StatusCode (INVALID_ARGUMENT for requests refused on this side), .details
    the server's (or the client's) message, .request_id the request's id when it had one."""

    def __init__(self, code, details, request_id=None):
        super().__init__("%s: %s" % (code.name, details))
        self.code = code
        self.details = details
        self.request_id = request_id

    @classmethod
    def from_rpc_error(cls, err, request_id=None):
        return cls(err.code(), err.details() or "", request_id)


def invalid(details):
    """A request the client refuses before sending it."""
    return PosencError(grpc.StatusCode.INVALID_ARGUMENT, details)
