// Debian 12's civetweb (1.15) is built for OpenSSL 1.1's API but loads the system's
// OpenSSL 3 with dlopen at run time. OpenSSL 3 has no SSL_get_peer_certificate (it became
// SSL_get1_peer_certificate, the same function), so civetweb's table entry for it stays
// null and every HTTPS connection crashes the process when civetweb asks for the client's
// certificate after the handshake. RepairCivetwebTls fills that one entry.
// Call after mg_init_library(MG_FEATURES_SSL) and before mg_start. Idempotent; not
// thread-safe against a running civetweb.
#pragma once

#include "absl/status/status.h"

namespace posenc {

// OK when civetweb's table has every OpenSSL function it calls (already, or once repaired);
// FAILED_PRECONDITION when the entry cannot be found, in which case TLS must not be served.
absl::Status RepairCivetwebTls();

}  // namespace posenc
