#include "server/http/civetweb_tls.h"

#include <link.h>
#include <openssl/ssl.h>

#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

namespace posenc {
namespace {

// civetweb's `struct ssl_func { const char* name; enum required; void (*ptr)(void); }`.
struct SslFunc {
  const char* name;
  int required;
  void (*ptr)(void);
};

struct Segment {
  uintptr_t start;
  size_t size;
  bool writable;
};

struct Library {
  std::vector<Segment> segments;
};

int FindCivetweb(dl_phdr_info* info, size_t, void* data) {
  if (info->dlpi_name == nullptr || std::strstr(info->dlpi_name, "libcivetweb.so") == nullptr) {
    return 0;
  }
  auto* lib = static_cast<Library*>(data);
  for (int i = 0; i < info->dlpi_phnum; ++i) {
    const ElfW(Phdr)& ph = info->dlpi_phdr[i];
    if (ph.p_type != PT_LOAD) continue;
    lib->segments.push_back({info->dlpi_addr + ph.p_vaddr, ph.p_memsz, (ph.p_flags & PF_W) != 0});
  }
  return 1;
}

X509* GetPeerCertificate(const SSL* ssl) { return SSL_get1_peer_certificate(ssl); }

}  // namespace

absl::Status RepairCivetwebTls() {
  Library lib;
  dl_iterate_phdr(&FindCivetweb, &lib);
  // The name string, NUL-delimited on both sides (not the tail of a longer name).
  static constexpr char kName[] = "\0SSL_get_peer_certificate";
  const char* name = nullptr;
  for (const Segment& s : lib.segments) {
    if (s.writable) continue;
    const void* hit = memmem(reinterpret_cast<const void*>(s.start), s.size, kName,
                             sizeof(kName));  // includes the closing NUL
    if (hit != nullptr) {
      name = static_cast<const char*>(hit) + 1;
      break;
    }
  }
  if (name == nullptr) {
    // A civetweb built for OpenSSL 3's API asks for SSL_get1_peer_certificate instead.
    static constexpr char kName3[] = "\0SSL_get1_peer_certificate";
    for (const Segment& s : lib.segments) {
      if (!s.writable &&
          memmem(reinterpret_cast<const void*>(s.start), s.size, kName3, sizeof(kName3))) {
        return absl::OkStatus();
      }
    }
  }
  if (name != nullptr) {
    for (const Segment& s : lib.segments) {
      if (!s.writable) continue;
      for (uintptr_t p = (s.start + alignof(SslFunc) - 1) & ~(alignof(SslFunc) - 1);
           p + sizeof(SslFunc) <= s.start + s.size; p += alignof(SslFunc)) {
        auto* entry = reinterpret_cast<SslFunc*>(p);
        if (entry->name != name) continue;
        if (entry->ptr == nullptr) {
          entry->ptr = reinterpret_cast<void (*)(void)>(&GetPeerCertificate);
        }
        return absl::OkStatus();
      }
    }
  }
  return absl::FailedPreconditionError(
      "--tls_cert: this civetweb's OpenSSL table has no SSL_get_peer_certificate entry to "
      "repair, and would crash on the first HTTPS connection; serve HTTP without TLS or "
      "turn it off with --http_listen=");
}

}  // namespace posenc
