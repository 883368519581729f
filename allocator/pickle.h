// A minimal Python pickle writer (protocol 2) for JSON-shaped data, so memory snapshots can
// be opened by viewers that only read pickles (pytorch.org/memory_viz,
// `python -m torch.cuda._memory_viz`). Only the opcodes those readers understand are used:
//   PROTO 2, EMPTY_DICT/MARK/SETITEMS, EMPTY_LIST/MARK/APPENDS, BINUNICODE,
//   BININT1/BININT2/BININT/LONG1, BINFLOAT, NEWTRUE/NEWFALSE, NONE, STOP.
// No memo is written (each value is emitted in full), which both readers accept.
#pragma once
#include <string>

#include <nlohmann/json_fwd.hpp>

namespace lt::alloc {

// The pickle bytes of `value` (dict/list/str/int/float/bool/None).
std::string pickle_dumps(const nlohmann::json& value);

}  // namespace lt::alloc
