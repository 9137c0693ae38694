#include "goodput/goodput_model.hpp"

#include <doctest/doctest.h>

using namespace dlrun::runtime;

namespace {
GoodputModel sample() {
  GoodputModel m;
  m.params = {0.02, 0.0005, 0.03, 0.003, 0.03, 0.003, 3.0};
  m.noise_scale = 2000;
  m.limits.initial_batch = 256;
  m.limits.max_batch = 8192;
  m.limits.max_micro_batch = 256;
  m.measured_replicas = {1, 2};
  m.replicas = 2;
  m.global_batch = 512;
  return m;
}
GoodputModel sample_with(GoodputModel m, bool compute_timed) {
  m.compute_timed = compute_timed;
  return m;
}
}  // namespace

TEST_SUITE("goodput::GoodputModel") {
  TEST_CASE("a published model reads back and predicts what its writer would") {
    auto m = sample();
    auto back = parse_goodput_model(to_json(m));
    REQUIRE(back);
    CHECK(back->params.gamma == 3.0);
    CHECK(back->noise_scale == 2000);
    CHECK(back->measured_replicas == std::vector<int>{1, 2});
    for (int r : {1, 2, 4, 8}) CHECK(predict_goodput(*back, r) == doctest::Approx(predict_goodput(m, r)));
    // A job with a large noise scale and a modest sync cost gains from more replicas.
    CHECK(predict_goodput(m, 4) > predict_goodput(m, 1));
  }
  TEST_CASE("fewer replicas than measured, with the compute never timed alone, scale down from the fewest") {
    // A helper's job, timed at 2 and 3 ranks only: the fit put the step's fixed cost in the sync,
    // and 1 rank was predicted at many times the throughput it then measured.
    auto m = sample();
    m.params = {1e-6, 0.0, 0.05, 0.001, 0.05, 0.001, 1.0};
    m.measured_replicas = {2, 3};
    const double free_of_sync = predict_goodput(m, 1);
    m.compute_timed = false;
    auto back = parse_goodput_model(to_json(m));
    REQUIRE(back);
    CHECK_FALSE(back->compute_timed);
    CHECK(predict_goodput(*back, 1) == doctest::Approx(predict_goodput(*back, 2) / 2));
    CHECK(predict_goodput(*back, 1) < free_of_sync / 100);
    CHECK(predict_goodput(*back, 3) == doctest::Approx(predict_goodput(sample_with(m, true), 3)));
    // A file from before the field: its prediction is as it was.
    std::string old = to_json(m);
    old.erase(old.find(",\"compute_timed\":false"), std::string(",\"compute_timed\":false").size());
    REQUIRE(parse_goodput_model(old));
    CHECK(parse_goodput_model(old)->compute_timed);
  }

  TEST_CASE("the efficiency model is published, and a model without one is sgd's") {
    auto m = sample();
    m.noise_scale = 300;
    m.efficiency = EfficiencyModel::adam;
    const std::string text = to_json(m);
    CHECK(text.find("\"efficiency\":\"adam\"") != std::string::npos);
    auto back = parse_goodput_model(text);
    REQUIRE(back);
    CHECK(back->efficiency == EfficiencyModel::adam);
    // Adam's efficiency falls more slowly, so the predicted goodput at 8 replicas is higher.
    auto sgd = m;
    sgd.efficiency = EfficiencyModel::sgd;
    CHECK(predict_goodput(*back, 8) > predict_goodput(sgd, 8));
    // Files written before the field existed.
    std::string old = to_json(sgd);
    const auto at = old.find(",\"efficiency\":\"sgd\"");
    REQUIRE(at != std::string::npos);
    old.erase(at, std::string(",\"efficiency\":\"sgd\"").size());
    auto read_old = parse_goodput_model(old);
    REQUIRE(read_old);
    CHECK(read_old->efficiency == EfficiencyModel::sgd);
    std::string unknown = text;
    unknown.replace(unknown.find("\"adam\""), 6, "\"lars\"");
    CHECK_FALSE(parse_goodput_model(unknown));
  }
  TEST_CASE("anything but a whole model of this version is refused") {
    std::string text = to_json(sample());
    CHECK_FALSE(parse_goodput_model(""));
    CHECK_FALSE(parse_goodput_model(text.substr(0, text.size() / 2)));
    CHECK_FALSE(parse_goodput_model("{\"version\": 2}"));
    auto bad = sample();
    bad.params.gamma = 0.5;
    CHECK_FALSE(parse_goodput_model(to_json(bad)));
    bad = sample();
    bad.params.beta_c = -1;
    CHECK_FALSE(parse_goodput_model(to_json(bad)));
  }
}
