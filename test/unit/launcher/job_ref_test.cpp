#include "dlrun/launcher/job_ref.hpp"

#include <doctest/doctest.h>

#include "dlrun/error.hpp"

using namespace dlrun::launcher;

TEST_SUITE("launcher::JobRef") {
  TEST_CASE("a number is a job's number, other text a name or a time-stamped id") {
    auto numbered = parse_job_ref("17");
    CHECK(numbered.number == 17);
    auto run = parse_job_ref("20261123-120000-ab12");
    CHECK_FALSE(run.number);
    CHECK(run.text == "20261123-120000-ab12");
    CHECK_FALSE(parse_job_ref("mnist-small").number);
  }
  TEST_CASE("text that names no job is refused before anything looks for it") {
    for (const char* bad : {"", "../../etc", "a/b", ".hidden", "x y", "17;rm", "99999999999999999999"}) {
      CAPTURE(bad);
      CHECK_THROWS_AS(parse_job_ref(bad), dlrun::ConfigError);
    }
    CHECK_THROWS_AS(parse_job_ref(std::string(129, 'a')), dlrun::ConfigError);
    CHECK_NOTHROW(parse_job_ref(std::string(128, 'a')));
  }
  TEST_CASE("a job's name is one every verb can name it by") {
    CHECK_FALSE(job_name_problem("mnist-small.v2"));
    for (const char* bad : {"my job", "-x", ".x", "a/b", ""}) {
      CAPTURE(bad);
      REQUIRE(job_name_problem(bad));
      CHECK(job_name_problem(bad)->find("a name is letters, digits") != std::string::npos);
    }
    CHECK(job_name_problem("77") == "77: a number is a job's number; add a letter");
    CHECK(job_name_problem(std::string(129, 'a')));
    CHECK(job_name_from("my train.sh") == "my_train.sh");
    CHECK(job_name_from("123") == "job-123");
    CHECK(job_name_from("-x") == "_x");
    CHECK(job_name_from("a..b") == "a._b");
    CHECK(job_name_from("") == "job");
    CHECK(job_name_from(std::string(200, 'a')).size() == 128);
    for (const char* program : {"my train.sh", "123", "-x", ".hidden", "a..b", "\xff\n", "train.py"}) {
      CAPTURE(program);
      CHECK_FALSE(job_name_problem(job_name_from(program)));
    }
    CHECK_THROWS_WITH_AS(check_job_name("77"), "--name 77: a number is a job's number; add a letter",
                         dlrun::ConfigError);
  }
}
