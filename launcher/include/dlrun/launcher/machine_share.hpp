#pragma once
// How many GPUs one store's jobs may use while other users' jobs wait for GPUs it holds: each
// store (a user's DLRUN_HOME) schedules its own jobs, so the machine is shared by each
// scheduler leaving room for the others' waiting jobs, down to its fair share. Pure.
//
//   base   = the machine's GPUs − those other stores' jobs hold
//   share  = the machine's GPUs / stores with GPU jobs (this one included)
//   floor  = max(what this store's running jobs cannot give back, min(share, base))
//   for each waiting job elsewhere, oldest first: room is left for its MIN when base − room −
//   MIN ≥ floor (0 instead of the share for one that has waited past starvation_seconds);
//   a MIN that cannot be met so is left out (room for it would stay idle)
//   capacity = base − room

#include <vector>

namespace dlrun::launcher {

struct WaitingElsewhere {
  int gpus = 0;           // its MIN
  bool starving = false;  // waited past starvation_seconds
};

struct MachineShareInput {
  int total = 0;                          // the machine's GPUs
  int held_elsewhere = 0;                 // GPUs other stores' jobs hold
  int least_here = 0;                     // GPUs this store's running jobs cannot give back (rigid, pinned, MINs)
  int stores = 1;                         // stores with GPU jobs, this one included
  std::vector<WaitingElsewhere> waiting;  // other stores' waiting jobs, oldest first
};

// The GPUs this store's jobs may use now.
int capacity_beside_others(const MachineShareInput& in);

}  // namespace dlrun::launcher
