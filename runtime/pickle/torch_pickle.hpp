// Python pickle for the Value tree, as torch.save writes and torch.load reads it.
//
// Writer: protocol 2 (torch.save's default), what CPython's pickler emits for
// the same objects minus the memo (a tree needs none): dicts as EMPTY_DICT +
// SETITEMS batches, lists as EMPTY_LIST + APPENDS, small tuples as TUPLE1..3,
// str as BINUNICODE, bytes as protocol 2 does (_codecs.encode(latin-1 text)),
// ints as BININT1/BININT2/BININT/LONG1, floats as BINFLOAT. A tensor becomes
// torch._utils._rebuild_tensor_v2 over a persistent storage id
// ('storage', torch.<Type>Storage, key, 'cpu', numel); the storages to write go
// to the caller (torch_file.cpp puts them in the zip as data/<key>).
//
// Reader: protocols 0–5 as far as plain data goes (the opcodes CPython emits for
// None/bool/int/float/str/bytes/list/tuple/dict/set, memo, frames), plus the
// globals torch files use: collections.OrderedDict, _rebuild_tensor_v2/v3,
// _rebuild_parameter, torch storage classes and dtypes, _codecs.encode,
// builtins set/frozenset/bytes/bytearray. Any other global is an error naming
// it. Every read is bounds-checked: bad input throws rl::Error, never crashes.
#pragma once

#include <functional>
#include <string>
#include <string_view>
#include <vector>

#include "pickle/py_value.hpp"

namespace rl::pickle {

// A storage the pickle refers to by key (the writer's output).
struct PickledStorage {
  std::string key;
  std::shared_ptr<const std::string> bytes;
};

// Pickles `v` (protocol 2). Tensors sharing a storage share its key; keys are
// "0", "1", ... in first-use order.
std::string pickle_dump(const Value& v, std::vector<PickledStorage>* storages);

// Resolves a persistent id (BINPERSID's tuple) to a value (a storage as a 1-D
// tensor over all its elements). Throws rl::Error for ids it does not know.
using PersistentLoader = std::function<Value(const Value& pid)>;

// Unpickles one object from `data` starting at `*pos`; on return `*pos` is just
// past its STOP. `where` prefixes error messages ("dump.pt: data.pkl").
Value pickle_load(std::string_view data, size_t* pos, const PersistentLoader& persistent, const std::string& where);

// Throws rl::Error (prefixed with `where`) if `v` contains a Global or a tensor
// whose view leaves its storage; `max_depth` bounds nesting (a cycle fails here).
void check_loaded(const Value& v, const std::string& where, int max_depth = 512);

}  // namespace rl::pickle
