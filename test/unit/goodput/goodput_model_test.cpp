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
