#include "dlrun/launcher/job_environment.hpp"

#include <doctest/doctest.h>

#include "dlrun/error.hpp"

using namespace dlrun::launcher;

TEST_SUITE("launcher::job_environment") {
  TEST_CASE("a job keeps paths, locale and the libraries' variables, not the rest") {
    Environment submitter = {{"PATH", "/bin"}, {"HOME", "/h"}, {"LC_ALL", "C"}, {"NCCL_DEBUG", "INFO"},
                             {"CUDA_VISIBLE_DEVICES", "1"}, {"PYTHONPATH", "/p"}, {"DLRUN_HOME", "/d"},
                             {"AWS_SECRET_ACCESS_KEY", "x"}, {"GITHUB_TOKEN", "y"}, {"WANDB_API_KEY", "z"}};
    auto kept = job_environment(submitter, {});
    CHECK(kept.size() == 7);
    CHECK(kept.count("AWS_SECRET_ACCESS_KEY") == 0);
    CHECK(kept.count("WANDB_API_KEY") == 0);
    kept = job_environment(submitter, {"WANDB_API_KEY", "AWS_*"});
    CHECK(kept.count("WANDB_API_KEY") == 1);
    CHECK(kept.count("AWS_SECRET_ACCESS_KEY") == 1);
    CHECK(kept.count("GITHUB_TOKEN") == 0);
    CHECK(job_environment(submitter, {"*"}) == submitter);
    // A job submitted from a rank is not that rank's job: never its supervisor's token.
    submitter["DLRUN_SUPERVISOR_ID"] = "123-456";
    CHECK(job_environment(submitter, {"*"}).count("DLRUN_SUPERVISOR_ID") == 0);
  }
  TEST_CASE("another host gets only what export_env names") {
    Environment env = {{"PATH", "/here/bin"}, {"HF_TOKEN", "t"}, {"HF_HOME", "/h"}, {"SECRET", "s"},
                       {"DLRUN_SUPERVISOR_ID", "1-2"}};
    CHECK(exported_by_name(env, {"HF_*"}) == Environment{{"HF_HOME", "/h"}, {"HF_TOKEN", "t"}});
    CHECK(exported_by_name(env, {}).empty());
    CHECK(exported_by_name(env, {"*"}).count("DLRUN_SUPERVISOR_ID") == 0);
  }
  TEST_CASE("sbatch is run with what the job keeps and with Slurm's own settings") {
    Environment submitter = {{"PATH", "/bin"}, {"SLURM_CONF", "/etc/slurm.conf"}, {"SBATCH_PARTITION", "gpu"},
                             {"AWS_SECRET_ACCESS_KEY", "x"}, {"WANDB_API_KEY", "w"}};
    CHECK(sbatch_environment(submitter, {"WANDB_API_KEY"}) ==
          Environment{{"PATH", "/bin"}, {"SBATCH_PARTITION", "gpu"}, {"SLURM_CONF", "/etc/slurm.conf"},
                      {"WANDB_API_KEY", "w"}});
  }
  TEST_CASE("export_env takes names, prefixes and everything") {
    for (const char* good : {"A", "_X1", "HF_*", "*"}) CHECK(valid_export_pattern(good));
    for (const char* bad : {"", "1A", "A B", "*X", "A*B", "**", "A-B"}) {
      CAPTURE(bad);
      CHECK_FALSE(valid_export_pattern(bad));
    }
  }
  TEST_CASE("dlrun run -x: NAME=VALUE, NAME, PREFIX*, and this shell's NCCL_* without it") {
    Environment here = {{"PATH", "/bin"}, {"NCCL_DEBUG", "INFO"}, {"NCCL_IB_DISABLE", "1"}, {"WANDB_PROJECT", "p"},
                        {"WANDB_MODE", "offline"}, {"SECRET", "s"}, {"DLRUN_SUPERVISOR_ID", "1-2"}};
    CHECK(forwarded_environment(here, {}) == Environment{{"NCCL_DEBUG", "INFO"}, {"NCCL_IB_DISABLE", "1"}});
    auto out = forwarded_environment(here, {"FOO=bar=baz", "SECRET", "WANDB_*", "NCCL_DEBUG=WARN", "EMPTY="});
    CHECK(out.at("FOO") == "bar=baz");
    CHECK(out.at("SECRET") == "s");
    CHECK(out.at("WANDB_PROJECT") == "p");
    CHECK(out.at("WANDB_MODE") == "offline");
    CHECK(out.at("NCCL_DEBUG") == "WARN");
    CHECK(out.at("EMPTY").empty());
    CHECK(out.count("PATH") == 0);
    CHECK(forwarded_environment(here, {"*"}).count("DLRUN_SUPERVISOR_ID") == 0);
    CHECK(forwarded_environment(here, {"*"}).count("PATH") == 1);
    CHECK_THROWS_WITH_AS(forwarded_environment(here, {"MISSING"}), doctest::Contains("not set in this shell"),
                         dlrun::ConfigError);
    CHECK_THROWS_WITH_AS(forwarded_environment(here, {"RANK=3"}), doctest::Contains("dlrun sets RANK"), dlrun::ConfigError);
    CHECK_THROWS_AS(forwarded_environment(here, {"DLRUN_SUPERVISOR_ID"}), dlrun::ConfigError);
    CHECK_THROWS_AS(forwarded_environment(here, {"1BAD=x"}), dlrun::ConfigError);
    CHECK_THROWS_AS(forwarded_environment(here, {"A*=x"}), dlrun::ConfigError);
    CHECK_THROWS_AS(forwarded_environment(here, {"=x"}), dlrun::ConfigError);
  }
  TEST_CASE("dlrun run -x PREFIX*: the patterns that forward nothing are named") {
    Environment here = {{"WANDB_MODE", "offline"}, {"RANK", "0"}, {"DLRUN_SUPERVISOR_ID", "1-2"}};
    CHECK(unmatched_env_patterns(here, {"WANDB_*", "A=1", "NAME"}).empty());
    CHECK(unmatched_env_patterns(here, {"WANDX_*", "WANDX_*", "RANK*", "DLRUN_SUPER*"}) ==
          std::vector<std::string>{"WANDX_*", "RANK*", "DLRUN_SUPER*"});
  }
  TEST_CASE("variables a submitted job's command names but would not get are found") {
    const Environment here = {{"MY_DATA", "/d"}, {"HOME", "/root"}, {"OUT", "o"}, {"SET_IN_FILE", "x"}};
    const Environment kept = {{"HOME", "/root"}};
    const Environment job_env = {{"SET_IN_FILE", "y"}};
    CHECK(variables_left_behind({"sh", "-c", "cp $MY_DATA ${OUT}/x ${MY_DATA:-z} $HOME $1 $$ $? ${#OUT} $NOT_SET $SET_IN_FILE"},
                                here, kept, job_env) == std::vector<std::string>{"MY_DATA", "OUT"});
    CHECK(variables_left_behind({"train", "--lr", "0.1"}, here, kept, job_env).empty());
  }
}
