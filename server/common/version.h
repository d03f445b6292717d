// The one version string of posenc's binaries and ListSchemes (posenc_build_info's label).
// Keep it equal to project(posenc VERSION ...) in the top CMakeLists.txt.
#pragma once

namespace posenc {

inline constexpr char kVersion[] = "0.2.0";

}  // namespace posenc
