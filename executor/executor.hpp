// The executor component's public header: which executor runs the scheduled queries.
#pragma once

#include "core/types.hpp"

namespace canopy {

enum class ExecutorKind {
  Independent,   // one thread (GPU) or task (CPU) per query, each with its own rope stack
  MaskLockstep,  // Goldfarb et al.'s lockstep: mask vector on the rope stack
  FsmLockstep,   // the paper's FSM lockstep: state and critical depth in registers
  Auto,          // the runtime chooses, by a trial (runtime/engine.hpp, AutoChoice)
};

inline const char* to_string(ExecutorKind k) {
  static constexpr const char* kNames[] = {"independent", "mask-lockstep", "fsm-lockstep", "auto"};
  return enum_name(k, kNames);
}

}  // namespace canopy
