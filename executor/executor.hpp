// The executor component's public header: which executor runs the scheduled queries.
#pragma once

namespace canopy {

enum class ExecutorKind {
  Independent,   // one thread (GPU) or task (CPU) per query, each with its own rope stack
  MaskLockstep,  // Goldfarb et al.'s lockstep: mask vector on the rope stack
  FsmLockstep,   // the paper's FSM lockstep: state and critical depth in registers
};

inline const char* to_string(ExecutorKind k) {
  switch (k) {
    case ExecutorKind::Independent: return "independent";
    case ExecutorKind::MaskLockstep: return "mask-lockstep";
    case ExecutorKind::FsmLockstep: return "fsm-lockstep";
  }
  return "?";
}

}  // namespace canopy
