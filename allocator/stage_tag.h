// The allocator's trace tags each event with the name of the stage running when it
// happened. The allocator sits below kernels/ and engine/, so it cannot ask them; the
// stage scopes (kernels/launch.h) push the current name down through this setter.
#pragma once

namespace lt::alloc {

// Per-thread current stage tag. The pointer must stay valid until the next call on the
// same thread (StageScope passes its thread-local string's c_str()).
void set_stage_tag(const char* tag);
const char* stage_tag();  // "" when unset

}  // namespace lt::alloc
