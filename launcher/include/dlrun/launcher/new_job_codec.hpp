#pragma once
// A submitted job on its way from `dlrun submit` to the supervisor that records and runs it,
// through a pipe: length-prefixed fields ("12:spec text..."), any bytes, nothing parsed
// twice. The supervisor records the job itself, so that a job exists in the store only once
// its supervisor does (a submit killed half-way leaves no job without one).

#include <optional>
#include <string>
#include <string_view>

#include "dlrun/launcher/job_store.hpp"

namespace dlrun::launcher {

std::string encode_new_job(const NewJob& job);
// Empty for anything but a whole encoded job (a submit killed while writing it).
std::optional<NewJob> decode_new_job(std::string_view bytes);

}  // namespace dlrun::launcher
