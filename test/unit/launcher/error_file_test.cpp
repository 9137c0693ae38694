#include "dlrun/launcher/error_file.hpp"

#include <doctest/doctest.h>

using namespace dlrun::launcher;

TEST_SUITE("launcher::ErrorFile") {
  TEST_CASE("each rank's error file is in the run directory") {
    CHECK(error_file_path("/runs/j1", 3) == "/runs/j1/rank-3.error.json");
  }
  TEST_CASE("what @record writes gives the message and the traceback") {
    // As torch.distributed.elastic.multiprocessing.errors.ErrorHandler.record_exception writes it.
    auto error = parse_error_file(
        R"({"message": {"message": "ValueError: boom", "extraInfo": {"py_callstack": )"
        R"("Traceback (most recent call last):\n  File \"t.py\", line 3, in main\nValueError: boom\n", )"
        R"("timestamp": "1700000000"}}})");
    REQUIRE(error);
    CHECK(error->message == "ValueError: boom");
    CHECK(
        error->traceback ==
        "Traceback (most recent call last):\n  File \"t.py\", line 3, in main\nValueError: boom\n");
  }
  TEST_CASE("a message alone is enough") {
    auto error = parse_error_file(R"({"message": "RuntimeError: lost"})");
    REQUIRE(error);
    CHECK(error->message == "RuntimeError: lost");
    CHECK(error->traceback.empty());
  }
  TEST_CASE("a message reaches the terminal printable, and of a bounded size") {
    // Escape sequences went raw to the terminal; 5 MB went into the error line and the REASON.
    auto error = parse_error_file(R"({"message": "bad\u001b[2J\nsecond line\tx"})");
    REQUIRE(error);
    CHECK(error->message == "bad\xEF\xBF\xBD[2J\nsecond line\xEF\xBF\xBDx");
    const std::string huge(100000, 'e');
    error = parse_error_file("{\"message\": \"" + huge + "\"}");
    REQUIRE(error);
    CHECK(error->message.size() < 4200);
    CHECK(error->message.find("… (95904 more bytes in the rank's error file)") != std::string::npos);
  }
  TEST_CASE("anything else is not an error file") {
    CHECK_FALSE(parse_error_file(""));
    CHECK_FALSE(parse_error_file("{\"message\": {\"message\": "));
    CHECK_FALSE(parse_error_file("[1, 2]"));
    CHECK_FALSE(parse_error_file(R"({"other": "x"})"));
    CHECK_FALSE(parse_error_file(R"({"message": {"extraInfo": {}}})"));
    CHECK_FALSE(read_error_file("/nonexistent/rank-0.error.json"));
  }
  TEST_CASE("a long traceback keeps its end") {
    CHECK(traceback_lines("a\nb\nc\n\n", 5) == std::vector<std::string>{"a", "b", "c"});
    CHECK(traceback_lines("a\nb\nc\nd\n", 2) ==
          std::vector<std::string>{"… 2 lines left out …", "c", "d"});
    CHECK(traceback_lines("a\nb\n", 1) == std::vector<std::string>{"… 1 line left out …", "b"});
  }
}
