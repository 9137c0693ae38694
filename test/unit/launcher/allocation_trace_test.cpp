#include "dlrun/launcher/allocation_trace.hpp"

#include <doctest/doctest.h>

#include <cctype>
#include <string_view>

using namespace dlrun::launcher;

namespace {

constexpr double t0 = 1700000000;  // 2023-11-14T22:13:20Z

AllocationEvent event(int64_t job, std::string name, double at, std::vector<std::string> gpus,
                      std::string cause = "scheduler") {
  AllocationEvent e;
  e.job = job;
  e.name = std::move(name);
  e.at = at;
  e.ranks = static_cast<int>(gpus.size());
  e.gpu_ids = std::move(gpus);
  e.cause = std::move(cause);
  return e;
}

AllocationEvent ended(int64_t job, double at) {
  AllocationEvent e = event(job, "", at, {}, "end");
  e.ranks = 0;
  return e;
}

// Job 1 ("big") starts on GPU 0, grows to 4 GPUs at t0 + `grow`, gives GPU 3 back at t0 +
// `share`, when job 2 ("small") takes it.
std::vector<AllocationEvent> grow_then_share(double grow, double share) {
  return {
      event(1, "big", t0, {"0"}, "start"),
      event(1, "big", t0 + grow, {"0", "1", "2", "3"}, "resize"),
      event(1, "big", t0 + share, {"0", "1", "2"}, "scheduler"),
      event(2, "small", t0 + share, {"3"}, "start"),
  };
}

TraceOptions window(double now, int width, int gpus = 0) {
  TraceOptions o;
  o.now = now;
  o.width = width;
  o.gpus = gpus;
  return o;
}

// The rows of the picture: its lines that start with "GPU ".
std::vector<std::string> gpu_rows(const std::string& text) {
  std::vector<std::string> rows;
  size_t start = 0;
  while (start < text.size()) {
    size_t end = text.find('\n', start);
    if (end == std::string::npos) end = text.size();
    std::string line = text.substr(start, end - start);
    if (line.rfind("GPU ", 0) == 0) rows.push_back(line);
    start = end + 1;
  }
  return rows;
}

size_t count(const std::string& text, std::string_view what) {
  size_t n = 0;
  for (size_t at = text.find(what); at != std::string::npos; at = text.find(what, at + 1)) ++n;
  return n;
}

// What a browser's XML parser checks that matters here: one root element, every tag closed
// in order, attribute values quoted and free of '<', '&' only as a known entity. Empty: well
// formed; otherwise what is wrong where.
std::string xml_problem(std::string_view xml) {
  size_t i = 0;
  auto starts = [&](std::string_view s) { return xml.substr(i, s.size()) == s; };
  auto entity_ok = [&](size_t at) {
    const size_t end = xml.find(';', at);
    if (end == std::string_view::npos) return false;
    const std::string_view name = xml.substr(at + 1, end - at - 1);
    if (name == "amp" || name == "lt" || name == "gt" || name == "quot" || name == "apos")
      return true;
    if (name.size() < 2 || name[0] != '#') return false;
    for (char c : name.substr(1)) {
      if (!std::isdigit(static_cast<unsigned char>(c))) return false;
    }
    return true;
  };
  auto name_at = [&]() {
    const size_t from = i;
    while (i < xml.size() && (std::isalnum(static_cast<unsigned char>(xml[i])) || xml[i] == '-' ||
                              xml[i] == ':' || xml[i] == '_')) {
      ++i;
    }
    return std::string(xml.substr(from, i - from));
  };
  auto skip_space = [&]() {
    while (i < xml.size() && std::isspace(static_cast<unsigned char>(xml[i]))) ++i;
  };
  if (starts("<?xml")) {
    i = xml.find("?>");
    if (i == std::string_view::npos) return "unclosed declaration";
    i += 2;
  }
  std::vector<std::string> open;
  int roots = 0;
  while (i < xml.size()) {
    const std::string where = " at " + std::to_string(i);
    if (starts("</")) {
      i += 2;
      const std::string name = name_at();
      if (open.empty() || open.back() != name || i >= xml.size() || xml[i] != '>')
        return "stray </" + name + where;
      open.pop_back();
      ++i;
    } else if (xml[i] == '<') {
      ++i;
      const std::string name = name_at();
      if (name.empty()) return "bad tag" + where;
      if (open.empty()) ++roots;
      for (;;) {
        skip_space();
        if (starts("/>")) {
          i += 2;
          break;
        }
        if (starts(">")) {
          open.push_back(name);
          ++i;
          break;
        }
        if (name_at().empty() || !starts("=")) return "bad attribute in <" + name + where;
        ++i;
        if (i >= xml.size() || (xml[i] != '"' && xml[i] != '\''))
          return "unquoted attribute" + where;
        const char quote = xml[i++];
        const size_t end = xml.find(quote, i);
        if (end == std::string_view::npos) return "unclosed attribute" + where;
        for (; i < end; ++i) {
          if (xml[i] == '<' || (xml[i] == '&' && !entity_ok(i)))
            return "bad character in attribute" + where;
        }
        ++i;
      }
    } else {
      if (xml[i] == '&' && !entity_ok(i)) return "bad entity" + where;
      if (open.empty() && !std::isspace(static_cast<unsigned char>(xml[i])))
        return "text outside the root" + where;
      ++i;
    }
  }
  if (!open.empty()) return "unclosed <" + open.back() + ">";
  if (roots != 1) return "roots: " + std::to_string(roots);
  return "";
}

}  // namespace

TEST_SUITE("launcher::AllocationTrace") {
  TEST_CASE("the test's XML check finds what a parser rejects") {
    CHECK(xml_problem("<svg><rect x=\"1\"/><text>a &amp; b</text></svg>\n") == "");
    CHECK(xml_problem("<svg><rect></svg>") != "");
    CHECK(xml_problem("<svg><text>a & b</text></svg>") != "");
    CHECK(xml_problem("<svg><rect x=\"<\"/></svg>") != "");
    CHECK(xml_problem("<svg><rect x=1/></svg>") != "");
    CHECK(xml_problem("<svg/><svg/>") != "");
  }

  TEST_CASE("no events: a line saying so, and a small valid SVG") {
    CHECK(render_trace_text({}, window(t0, 72, 4)) == "No allocations recorded.\n");
    const std::string svg = render_trace_svg({}, window(t0, 72, 4));
    CHECK(xml_problem(svg) == "");
    CHECK(svg.find("no allocations recorded") != std::string::npos);
    CHECK(svg.find("GPUs over time, 0 jobs") != std::string::npos);
    const TraceSummary s = summarise_trace({}, window(t0, 72, 4));
    CHECK(s.jobs.empty());
    CHECK(s.utilisation == 0);
  }

  TEST_CASE("one job on 2 of 4 GPUs for the whole window") {
    const std::vector<AllocationEvent> events = {event(1, "train", t0, {"0", "1"}, "start")};
    const std::string text = render_trace_text(events, window(t0 + 100, 10, 4));
    CHECK(text ==
          "4 GPUs, 1 job, 100s from 2023-11-14T22:13:20Z: utilisation 50.0% (200 of 400 "
          "GPU-seconds busy)\n"
          "GPU 0 |AAAAAAAAAA|\n"
          "GPU 1 |AAAAAAAAAA|\n"
          "GPU 2 |..........|\n"
          "GPU 3 |..........|\n"
          "       0s    100s\n"
          "   job  name   GPUs  GPU-seconds  from  to\n"
          "A  1    train  2     200          0s    100s  running\n");
    const TraceSummary s = summarise_trace(events, window(t0 + 100, 10, 4));
    CHECK(s.utilisation == doctest::Approx(0.5));
    CHECK(s.busy_gpu_seconds == doctest::Approx(200));
    CHECK(s.makespan == doctest::Approx(100));
    REQUIRE(s.jobs.size() == 1);
    CHECK(s.jobs[0].gpu_seconds == doctest::Approx(200));
    CHECK(s.jobs[0].running);
    CHECK(s.spans.size() == 2);
  }

  TEST_CASE("a job grows from 1 to 4 GPUs halfway, another takes GPU 3 after it shrinks") {
    const std::vector<AllocationEvent> events = grow_then_share(50, 80);
    const std::string text =
        render_trace_text(events, window(t0 + 100, 10));  // 4 GPUs from the ids
    CHECK(gpu_rows(text) == std::vector<std::string>{"GPU 0 |AAAAAAAAAA|", "GPU 1 |.....AAAAA|",
                                                     "GPU 2 |.....AAAAA|", "GPU 3 |.....AAABB|"});
    CHECK(text.find("utilisation 62.5% (250 of 400 GPU-seconds busy)") != std::string::npos);

    const TraceSummary s = summarise_trace(events, window(t0 + 100, 10));
    REQUIRE(s.jobs.size() == 2);
    CHECK(s.jobs[0].gpu_seconds == doctest::Approx(50 + 30 * 4 + 20 * 3));
    CHECK(s.jobs[0].peak_gpus == 4);
    CHECK(s.jobs[1].gpu_seconds == doctest::Approx(20));
    CHECK(s.jobs[1].first == t0 + 80);
    // GPU 0 is one span across the resizes; GPU 3 is job 1's until the third event, then job 2's.
    std::vector<TraceSpan> gpu0, gpu3;
    for (const auto& span : s.spans) {
      if (span.row == 0) gpu0.push_back(span);
      if (span.row == 3) gpu3.push_back(span);
    }
    REQUIRE(gpu0.size() == 1);
    CHECK(gpu0[0].from == t0);
    CHECK(gpu0[0].to == t0 + 100);
    CHECK_FALSE(gpu0[0].released);
    REQUIRE(gpu3.size() == 2);
    CHECK(gpu3[0].job == 0);
    CHECK(gpu3[0].got == 1);
    CHECK(gpu3[0].released == 2u);
    CHECK(gpu3[1].job == 1);
    CHECK(gpu3[1].from == t0 + 80);
  }

  TEST_CASE("a job that ends frees its GPUs") {
    const std::vector<AllocationEvent> events = {
        event(1, "a", t0, {"0", "1"}, "start"),
        ended(1, t0 + 40),
        event(2, "b", t0 + 60, {"1"}, "start"),
    };
    const std::string text = render_trace_text(events, window(t0 + 100, 10, 2));
    CHECK(gpu_rows(text) == std::vector<std::string>{"GPU 0 |AAAA......|", "GPU 1 |AAAA..BBBB|"});
    CHECK(text.find("A  1    a     2     80           0s    40s\n") != std::string::npos);
    CHECK(text.find("B  2    b     1     40           60s   100s  running\n") != std::string::npos);
    const TraceSummary s = summarise_trace(events, window(t0 + 100, 10, 2));
    CHECK_FALSE(s.jobs[0].running);
    CHECK(s.jobs[0].last == t0 + 40);
    CHECK(s.jobs[0].name == "a");  // the end event has no name: the earlier one stays
    CHECK(s.makespan == doctest::Approx(100));
  }

  TEST_CASE("jobs still running hold their GPUs until now, not beyond") {
    const std::vector<AllocationEvent> events = {event(1, "a", t0, {"0"}, "start")};
    TraceSummary s = summarise_trace(events, window(t0 + 300, 4, 1));
    CHECK(s.end == t0 + 300);
    CHECK(s.jobs[0].gpu_seconds == doctest::Approx(300));
    CHECK(s.utilisation == doctest::Approx(1));

    TraceOptions later = window(t0 + 300, 4, 1);
    later.end = t0 + 400;  // a window reaching past now: the last quarter is not held
    CHECK(gpu_rows(render_trace_text(events, later)) == std::vector<std::string>{"GPU 0 |AAA.|"});
    CHECK(summarise_trace(events, later).utilisation == doctest::Approx(0.75));

    // Without `now`, the last event ends the window: nothing has length, nothing divides by 0.
    s = summarise_trace(events, window(0, 4, 1));
    CHECK(s.end == s.begin);
    CHECK(s.utilisation == 0);
    CHECK(gpu_rows(render_trace_text(events, window(0, 4, 1))) ==
          std::vector<std::string>{"GPU 0 |....|"});
    CHECK(xml_problem(render_trace_svg(events, window(0, 4, 1))) == "");
  }

  TEST_CASE("a window clips what was held before and after it") {
    const std::vector<AllocationEvent> events = {
        event(1, "early", t0, {"0"}, "start"),      ended(1, t0 + 100),  // only before the window
        event(2, "spans", t0 + 50, {"1"}, "start"), ended(2, t0 + 250),
        event(3, "late", t0 + 300, {"0"}, "start"),  // only after it
    };
    TraceOptions o = window(t0 + 400, 10, 2);
    o.begin = t0 + 100;
    o.end = t0 + 200;
    const TraceSummary s = summarise_trace(events, o);
    REQUIRE(s.jobs.size() == 2);  // job 1's end event lies on the window's edge
    CHECK(s.jobs[0].job == 1);
    CHECK(s.jobs[0].gpu_seconds == 0);
    CHECK(s.jobs[1].job == 2);
    CHECK(s.jobs[1].gpu_seconds == doctest::Approx(100));
    CHECK(s.jobs[1].first == t0 + 100);
    CHECK(s.jobs[1].last == t0 + 200);
    CHECK(s.utilisation == doctest::Approx(0.5));
    CHECK(gpu_rows(render_trace_text(events, o)) ==
          std::vector<std::string>{"GPU 0 |..........|", "GPU 1 |BBBBBBBBBB|"});
  }

  TEST_CASE("events out of order, GPU ids that are not indices, a job and its CPU-only sibling") {
    std::vector<AllocationEvent> events = {
        event(2, "later", t0 + 50, {"GPU-abc"}, "start"),
        event(1, "first", t0, {"1"}, "start"),
    };
    AllocationEvent cpu = event(3, "cpu", t0, {}, "start");
    cpu.ranks = 2;
    events.push_back(cpu);
    const TraceSummary s = summarise_trace(events, window(t0 + 100, 4));
    CHECK(s.rows == std::vector<std::string>{"0", "1", "GPU-abc"});
    // The CPU-only job is counted, not drawn: the picture is of GPUs.
    REQUIRE(s.jobs.size() == 2);
    CHECK(s.cpu_only_jobs == 1);
    CHECK(s.jobs[0].job == 1);  // first in time, though second in the list
    CHECK(s.jobs[1].job == 2);
    const std::string text = render_trace_text(events, window(t0 + 100, 4));
    CHECK(gpu_rows(text) == std::vector<std::string>{"GPU 0       |....|", "GPU 1       |AAAA|", "GPU GPU-abc |..BB|"});
    CHECK(text.find("3 GPUs, 2 jobs") == 0);
    CHECK(text.find("(1 job on CPU slots only in the window, not drawn") != std::string::npos);
  }

  TEST_CASE("a column shows who held the GPU longest in it") {
    const std::vector<AllocationEvent> events = {
        event(1, "a", t0, {"0"}),      ended(1, t0 + 3),   // 3 of column 0's 10 seconds
        event(2, "b", t0 + 3, {"0"}),  ended(2, t0 + 7),   // 4 of them
        event(3, "c", t0 + 10, {"0"}), ended(3, t0 + 14),  // 4 of column 1's: idle held it 6
    };
    TraceOptions o = window(t0 + 20, 2, 1);
    CHECK(gpu_rows(render_trace_text(events, o)) == std::vector<std::string>{"GPU 0 |B.|"});
  }

  TEST_CASE("the SVG: a rectangle and tooltip per span, a colour per job, round ticks") {
    const std::vector<AllocationEvent> events = grow_then_share(377, 600);
    const std::string svg = render_trace_svg(events, window(t0 + 754, 72));
    CHECK(xml_problem(svg) == "");
    CHECK(svg.rfind("<?xml", 0) == 0);
    CHECK(svg.find("<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"900\"") != std::string::npos);
    CHECK(svg.find("GPUs over time, 2 jobs, utilisation ") != std::string::npos);
    CHECK(count(svg, "</title></rect>") == 5);   // GPU 0, 1, 2 and 3 for job 1, GPU 3 for job 2
    CHECK(count(svg, "<title>") == 7);           // and one per legend entry
    CHECK(count(svg, "fill=\"#4e79a7\"") == 5);  // job 1's four spans and its legend swatch
    CHECK(count(svg, "fill=\"#f28e2b\"") == 2);
    CHECK(
        svg.find(
            "<title>job 1 big, GPU 3\n377s to 600s (223s)\ngot it: resize, 4 ranks (GPUs 0,1,2,3)\n"
            "gave it back: scheduler, 3 ranks (GPUs 0,1,2)</title>") != std::string::npos);
    CHECK(svg.find("<title>job 2 small, GPU 3\n600s to 754s (154s)\ngot it: start, 1 rank (GPUs "
                   "3)\nstill held"
                   "</title>") != std::string::npos);
    for (const char* tick : {">0<", ">2m<", ">4m<", ">12m<"})
      CHECK(svg.find(tick) != std::string::npos);
    CHECK(svg.find(">14m<") == std::string::npos);
    CHECK(svg.find(">GPU 3<") != std::string::npos);
    CHECK(svg.find(">job 2: small (154 GPU-s)<") != std::string::npos);
  }

  TEST_CASE("hostile names are escaped in the SVG and cleaned in the text") {
    const std::string hostile = "<script>\"x\" & 'y'</script>\x1b[31m\xff";
    const std::vector<AllocationEvent> events = {event(1, hostile, t0, {"0"}, "start <&>"),
                                                 event(2, "ok", t0 + 1, {"1"}, "start")};
    const std::string svg = render_trace_svg(events, window(t0 + 10, 10));
    CHECK(xml_problem(svg) == "");
    CHECK(svg.find("<script") == std::string::npos);
    CHECK(svg.find('\x1b') == std::string::npos);
    CHECK(svg.find('\xff') == std::string::npos);
    CHECK(svg.find("&lt;script&gt;&quot;x&quot; &amp; "
                   "&apos;y&apos;&lt;/script&gt;\xEF\xBF\xBD[31m\xEF\xBF\xBD") !=
          std::string::npos);
    CHECK(svg.find("got it: start &lt;&amp;&gt;") != std::string::npos);
    const std::string text = render_trace_text(events, window(t0 + 10, 10));
    CHECK(text.find('\x1b') == std::string::npos);
    CHECK(text.find("<script>\"x\" & 'y'</script>\xEF\xBF\xBD[31m\xEF\xBF\xBD") !=
          std::string::npos);
  }

  TEST_CASE("legend characters: A-Z, a-z, 0-9, then #") {
    CHECK(trace_symbol(0) == 'A');
    CHECK(trace_symbol(25) == 'Z');
    CHECK(trace_symbol(26) == 'a');
    CHECK(trace_symbol(51) == 'z');
    CHECK(trace_symbol(52) == '0');
    CHECK(trace_symbol(61) == '9');
    CHECK(trace_symbol(62) == '#');
    CHECK(trace_symbol(1000) == '#');

    std::vector<AllocationEvent> events;  // 64 jobs, one second each on GPU 0, one after another
    for (int j = 0; j < 64; ++j) {
      events.push_back(event(100 + j, "job" + std::to_string(j), t0 + j, {"0"}, "start"));
      events.push_back(ended(100 + j, t0 + j + 1));
    }
    const std::string text = render_trace_text(events, window(t0 + 64, 64, 1));
    CHECK(gpu_rows(text) ==
          std::vector<std::string>{
              "GPU 0 |ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789##|"});
    CHECK(text.find("\n9  161") != std::string::npos);
    CHECK(text.find("\n#  162") != std::string::npos);
    CHECK(text.find("\n#  163") != std::string::npos);
    CHECK(text.find("utilisation 100.0%") != std::string::npos);
    CHECK(xml_problem(render_trace_svg(events, window(t0 + 64, 64, 1))) == "");
  }
}
