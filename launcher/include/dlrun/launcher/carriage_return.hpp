#pragma once
// Lines that redraw themselves: a progress bar (tqdm, the examples' bars) writes
// "\r 10%|#  |", "\r 20%|## |", … and a newline only at its end. A terminal shows the last
// redraw, so that is what dlrun shows of such a line; the rank's log file keeps every byte.
// Pure.

#include <string>
#include <string_view>

namespace dlrun::launcher {

// Whether `text` shows anything: characters other than blanks and ANSI control sequences
// ("\x1b[K" clears, "\x1b[32m" colours).
bool has_visible_text(std::string_view text);

// What a terminal leaves of `line` after its carriage returns: its last non-empty
// '\r'-separated part, or "" when that part shows nothing (blanks or "\x1b[K" written over a
// bar clear it); `line` itself when it has no '\r'.
std::string_view shown_segment(std::string_view line);

// Drops the redraws of a pending, unfinished line that a later one replaced, keeping what
// shown_segment() needs, so that a bar redrawn for hours holds a few bytes, not megabytes.
void drop_replaced_redraws(std::string& pending);

}  // namespace dlrun::launcher
