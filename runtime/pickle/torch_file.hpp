// torch.save / torch.load file formats for Value trees, without LibTorch, so
// debug dumps work in every build (RLHOST_TORCH=OFF too).
//
// Saving writes what torch.save writes (the zip format, torch >= 1.6):
//   <archive>/data.pkl                 the pickled object (protocol 2)
//   <archive>/.format_version          "1"
//   <archive>/.storage_alignment       "64"
//   <archive>/byteorder                "little"
//   <archive>/data/<key>               one raw storage per key, 64-byte aligned
//   <archive>/version                  "3\n"
//   <archive>/.data/serialization_id   a random 40-digit id
// where <archive> is the file's stem, as torch names it. Python's
// torch.load(path, weights_only=False) returns the same tree of plain objects.
//
// Loading accepts that format and the legacy one (torch.save(...,
// _use_new_zipfile_serialization=False): magic, protocol, sys info, object,
// storage keys, raw storages).
#pragma once

#include <filesystem>
#include <string>
#include <string_view>

#include "pickle/py_value.hpp"

namespace rl::pickle {

// The bytes torch.save(v, "<archive_name>.pt") would write.
std::string torch_save_bytes(const Value& v, const std::string& archive_name = "archive");

// Writes `v` to `file` atomically (a temp file renamed over it), creating the
// parent directories. Throws rl::Error naming the file.
void torch_save(const Value& v, const std::filesystem::path& file);

// Parses a torch.save file held in memory; `where` names it in errors.
Value torch_load_bytes(std::string_view data, const std::string& where);

// Reads and parses `file`. Throws rl::Error naming the file and what is wrong
// (missing, not a torch file, truncated, bad CRC, unsupported object, ...).
Value torch_load(const std::filesystem::path& file);

}  // namespace rl::pickle
