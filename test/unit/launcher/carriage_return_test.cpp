#include "dlrun/launcher/carriage_return.hpp"

#include <string>

#include <doctest/doctest.h>

using dlrun::launcher::drop_replaced_redraws;
using dlrun::launcher::has_visible_text;
using dlrun::launcher::shown_segment;

TEST_SUITE("launcher::carriage_return") {
  TEST_CASE("blanks and ANSI control sequences show nothing") {
    CHECK_FALSE(has_visible_text(""));
    CHECK_FALSE(has_visible_text("  \t"));
    CHECK_FALSE(has_visible_text("\x1b[K"));
    CHECK_FALSE(has_visible_text("\x1b[2K  \x1b[0m"));
    CHECK(has_visible_text("\x1b[32mok\x1b[0m"));
    CHECK(has_visible_text(" 5%"));
  }
  TEST_CASE("a line without carriage returns is shown whole") {
    CHECK(shown_segment("epoch 1: loss 0.5") == "epoch 1: loss 0.5");
    CHECK(shown_segment("") == "");
  }
  TEST_CASE("a redrawn line shows its last redraw") {
    CHECK(shown_segment("\r 10%|#  |\r 20%|## |") == " 20%|## |");
    CHECK(shown_segment(" 10%\r 20%\r") == " 20%");           // redraw, then '\r' before the next
    CHECK(shown_segment("ok\r") == "ok");  // a CRLF line (the splitter took the '\n')
    CHECK(shown_segment("\r 99%\r\x1b[K") == "");               // the bar cleared itself
    CHECK(shown_segment("\r 99%\r   \r") == "");                // … with blanks
    CHECK(shown_segment("\r 50%\r\x1b[Kdone") == "done");  // cleared, then a line
  }
  TEST_CASE("only the redraws a later one replaced are dropped") {
    std::string pending = "loading\r 10%\r 20%\r 3";
    drop_replaced_redraws(pending);
    CHECK(pending == "\r 3");
    CHECK(shown_segment(pending) == " 3");
    pending = "\r 10%\r 20%\r";  // the next redraw has not come yet
    drop_replaced_redraws(pending);
    CHECK(pending == "\r 20%\r");
    CHECK(shown_segment(pending) == " 20%");
    pending = "\r 10%\r 20%\r\x1b[K";  // cleared
    drop_replaced_redraws(pending);
    CHECK(pending == "\r\x1b[K");
    CHECK(shown_segment(pending) == "");
    pending = "no carriage return";
    drop_replaced_redraws(pending);
    CHECK(pending == "no carriage return");
    pending = "\r\x1b[K";
    drop_replaced_redraws(pending);
    CHECK(shown_segment(pending) == "");
  }
}
