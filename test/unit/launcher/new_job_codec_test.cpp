#include "dlrun/launcher/new_job_codec.hpp"

#include <doctest/doctest.h>

using namespace dlrun::launcher;

TEST_SUITE("launcher::new_job_codec") {
  TEST_CASE("a job survives the pipe byte for byte, and a cut one is refused") {
    NewJob job;
    job.name = "a:b\n";
    job.spec_text = std::string("command = [\"x\"]\0\xff", 17);
    job.spec_path = "/j/job.toml";
    job.base_dir = "/j";
    job.environment = std::string("A=1\0B=2:3\0", 10);
    job.request = {true, 2, 4, {"0", "3"}, false, true};
    job.owner_uid = -1;
    const std::string bytes = encode_new_job(job);
    auto back = decode_new_job(bytes);
    REQUIRE(back);
    CHECK(back->name == job.name);
    CHECK(back->spec_text == job.spec_text);
    CHECK(back->environment == job.environment);
    CHECK(back->request.gpu_ids == job.request.gpu_ids);
    CHECK(back->request.min_ranks == 2);
    CHECK(back->request.max_ranks == 4);
    CHECK(back->request.uses_gpus);
    CHECK(back->owner_uid == -1);
    CHECK(back->request.goodput);
    for (size_t cut = 0; cut < bytes.size(); cut += 7) CHECK_FALSE(decode_new_job(bytes.substr(0, cut)));
    CHECK_FALSE(decode_new_job(bytes + "1:x"));
  }
}
