#include "allocator/stage_tag.h"

namespace lt::alloc {
namespace {
thread_local const char* t_tag = "";
}
void set_stage_tag(const char* tag) { t_tag = tag ? tag : ""; }
const char* stage_tag() { return t_tag; }
}  // namespace lt::alloc
