// The CPU twins' entry points: check the arguments, then run the one compiled line of
// kernels/kda/instances.def that matches them (kernels/cpu/kda/twin.h).
#include "kernels/cpu/kda/twin.h"

#include "kernels/kda.h"
#include "kernels/kda/instances.h"

namespace lt::kda {

void fused_forward_cpu(const FusedArgs& a, const ForwardWorkspace& ws) {
  check_fused_args(a);
  check_workspace(ws);
  check_compiled(a);
  dispatch_instance(static_cast<int>(a.dims.D), static_cast<int>(a.dims.C), a.dtype, a.tensor_cores,
                    [&]<int D, int C, class T, bool kTC>() { twin::forward<D, C, T, kTC>(a, ws); });
}

void fused_backward_cpu(const FusedArgs& args, const BackwardWorkspace& ws, BackwardLaunches part) {
  check_fused_args(args, part);
  check_compiled(args);
  // resolved: scan_group 0 is one level; pick is full on the CPU; a split or two-level scan is lean
  check_workspace(ws, part);
  FusedArgs a = args;
  if (a.scan_group == 0) a.scan_group = static_cast<int>(a.dims.NT());
  if (two_level_scan(a)) a.scan_split = 1;
  if (a.scan_first == ScanFirst::pick) a.scan_first = ScanFirst::serial;
  if (a.scan_split > 1 || two_level_scan(a)) a.lean_scan = LeanScan::lean;
  else if (a.lean_scan == LeanScan::pick) a.lean_scan = LeanScan::full;
  dispatch_instance(static_cast<int>(a.dims.D), static_cast<int>(a.dims.C), a.dtype, a.tensor_cores,
                    [&]<int D, int C, class T, bool kTC>() { twin::backward<D, C, T, kTC>(a, ws, part); });
}

}  // namespace lt::kda
