// A protobuf arena whose first block is memory its owner already has (part of the object
// that holds the arena), so that the small fields of one call's messages take no heap
// allocation at all.
#pragma once

#include <cstddef>

#include "google/protobuf/arena.h"

namespace posenc {

// Options for an arena starting in `block` (`bytes` long, aligned for any type); it takes
// further blocks from the heap. The block must outlive the arena.
inline google::protobuf::ArenaOptions FirstBlockOptions(char* block, size_t bytes) {
  google::protobuf::ArenaOptions options;
  options.initial_block = block;
  options.initial_block_size = bytes;
  return options;
}

}  // namespace posenc
