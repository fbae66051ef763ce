// Command-line flags of the tools (examples and benchmarks share it: attnrt_flags), over CLI11.
// A tool declares each flag once (name, destination, help, range); parsing, --help (with the
// defaults) and error messages naming the flag and the value all come from those declarations,
// so the help cannot drift from the parser. Every tool also answers --version (the library's
// version) and takes --log-level (the library's logger). Parse never throws and prints nothing
// through iostreams (only stdio), so a caller, or the flags fuzzer, sees all of its output.
#pragma once

#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <limits>
#include <memory>
#include <sstream>
#include <string>
#include <type_traits>
#include <vector>

#include <CLI/CLI.hpp>

#include <attnrt/log.h>
#include <attnrt/runtime.h>
#include <attnrt/version.h>

namespace attnrt::tools {

class FlagSet {
 public:
  // `summary`: the first line(s) of --help.
  FlagSet(std::string tool, std::string summary)
      : tool_(std::move(tool)), app_(std::make_unique<CLI::App>(std::move(summary), tool_)) {
    // -h is answered by Parse alone: CLI11 would also read "-hx" as -h bundled with -x.
    app_->set_help_flag("--help", "this text and exit (also -h)");
    // A flag given twice: the last one counts (and is checked), as with most Unix tools.
    app_->option_defaults()->multi_option_policy(CLI::MultiOptionPolicy::TakeLast);
    app_->formatter(std::make_shared<HelpFormatter>());
  }

  // Integers (int, long, uint64_t) within [lo, hi].
  template <typename T>
  void Int(const char* name, T* dst, const char* help, double lo = 0, double hi = 1 << 30) {
    Add(name, "N", help, std::to_string(*dst), [=](const std::string& v) {
      double x;
      if (!ParseNumber(v, &x) || x != std::floor(x) || x < lo || x > hi) {
        return Range("an integer", lo, hi);
      }
      *dst = static_cast<T>(x);
      return std::string();
    });
  }
  void Double(const char* name, double* dst, const char* help, double lo = 0, double hi = 1e15) {
    Add(name, "X", help, Format(*dst), [=](const std::string& v) {
      double x;
      if (!ParseNumber(v, &x) || x < lo || x > hi) return Range("a number", lo, hi);
      *dst = x;
      return std::string();
    });
  }
  void String(const char* name, std::string* dst, const char* help) {
    Add(name, "TEXT", help, *dst, [=](const std::string& v) {
      *dst = v;
      return std::string();
    });
  }
  // One of `choices`.
  void Choice(const char* name, std::string* dst, std::vector<std::string> choices,
              const char* help) {
    std::string all;
    for (const std::string& c : choices) {
      if (!all.empty()) all += '|';
      all += c;
    }
    Add(name, all, help, *dst, [=](const std::string& v) {
      for (const std::string& c : choices) {
        if (v == c) {
          *dst = v;
          return std::string();
        }
      }
      return "expected one of " + all;
    });
  }
  // A switch: present means true.
  void Bool(const char* name, bool* dst, const char* help) {
    app_->add_flag_callback(name, [dst] { *dst = true; }, help);
  }
  // Comma-separated numbers, each >= 0 (and, for an integer T, below 2^digits: it must fit T).
  template <typename T>
  void List(const char* name, std::vector<T>* dst, const char* help) {
    std::string def;
    for (const T& x : *dst) {
      if (!def.empty()) def += ',';
      def += Format(static_cast<double>(x));
    }
    Add(name, "A,B,...", help, def, [=](const std::string& v) {
      std::vector<T> out;
      std::stringstream ss(v);
      std::string item;
      while (std::getline(ss, item, ',')) {
        double x;
        if (!ParseNumber(item, &x) || x < 0) return std::string("expected numbers >= 0, comma-separated");
        if constexpr (std::is_integral_v<T>) {
          // Casting a double at or past 2^digits to T is undefined behaviour, not a wrap.
          if (x >= std::ldexp(1.0, std::numeric_limits<T>::digits)) {
            return "expected numbers in [0, " + std::to_string(std::numeric_limits<T>::max()) +
                   "], comma-separated";
          }
        }
        out.push_back(static_cast<T>(x));
      }
      if (out.empty()) return std::string("expected at least one number");
      *dst = std::move(out);
      return std::string();
    });
  }
  // Text printed after the flag list in --help.
  void Footer(std::string text) { app_->footer(std::move(text)); }

  // kContinue to go on; otherwise the exit code: 0 after --help or --version (printed), 2 after
  // a usage error (printed on stderr as 'tool: what (see --help)', naming the flag).
  static constexpr int kContinue = -1;
  int Parse(int argc, char** argv) const {
    // --help and --version win wherever they stand (the first of them), before any value is
    // checked: a user asking for help gets it even with a mistake elsewhere on the line.
    for (int i = 1; i < argc; ++i) {
      const std::string a = argv[i];
      if (a == "--help" || a == "-h") {
        PrintHelp();
        return 0;
      }
      if (a == "--version") {
        std::printf("%s (attnrt %s, %s)\n", tool_.c_str(), Version(),
                    ATTNRT_WITH_CUDA ? "CUDA and CPU executors" : "CPU executor only");
        return 0;
      }
    }
    DeclareCommonFlags();
    try {
      app_->clear();
      app_->parse(argc, argv);
    } catch (const CLI::CallForHelp&) {
      PrintHelp();
      return 0;
    } catch (const CLI::ParseError& e) {
      std::fprintf(stderr, "%s: %s (see --help)\n", tool_.c_str(), e.what());
      return 2;
    } catch (const std::exception& e) {  // a conversion CLI11 does not wrap: still a usage error
      std::fprintf(stderr, "%s: %s (see --help)\n", tool_.c_str(), e.what());
      return 2;
    }
    return kContinue;
  }

  void PrintHelp() const {
    DeclareCommonFlags();
    std::fputs(app_->help().c_str(), stdout);
  }

 private:
  // '--flag VALUE   help (default: X)': the default after the help text, where it reads best.
  class HelpFormatter : public CLI::Formatter {
   public:
    HelpFormatter() { column_width(kColumn); }
    std::string make_option_opts(const CLI::Option* opt) const override {
      return opt->get_type_name().empty() ? "" : " " + opt->get_type_name();
    }
    std::string make_option_desc(const CLI::Option* opt) const override {
      std::string d = opt->get_description();
      if (!opt->get_default_str().empty()) d += " (default: " + opt->get_default_str() + ")";
      return Wrap(d, kHelpWidth - kColumn);
    }
    // A blank line between the summary and the usage line.
    std::string make_description(const CLI::App* app) const override {
      return CLI::Formatter::make_description(app) + "\n";
    }
    static constexpr std::size_t kColumn = 30, kHelpWidth = 100;

   private:
    // Breaks `text` into lines of at most `width` characters at spaces (CLI11 indents each).
    static std::string Wrap(const std::string& text, std::size_t width) {
      std::string out, line, word;
      std::istringstream words(text);
      while (words >> word) {
        if (!line.empty() && line.size() + 1 + word.size() > width) {
          out += line + "\n";
          line.clear();
        }
        line += (line.empty() ? "" : " ") + word;
      }
      return out + line;
    }
  };

  // --log-level and --version, declared last so that --help lists them after the tool's own.
  void DeclareCommonFlags() const {
    if (common_declared_) return;
    common_declared_ = true;
    // The library's logger, applied when the flags are parsed (the last one given wins).
    app_->add_option_function<std::string>(
            "--log-level",
            [](const std::string& level) {
              if (const Status s = SetLogLevel(level); !s.ok()) {
                throw CLI::ValidationError("--log-level = '" + level + "'", s.message());
              }
            },
            "the library's log level: " + std::string(kLogLevelNames) +
                " (SPDLOG_LEVEL, else info)")
        ->type_name("LEVEL");
    // Answered by Parse before CLI11 runs; declared for --help.
    app_->add_flag_callback("--version", [] {}, "the tool's and the library's version");
  }

  // Every valued flag reaches its destination through `set`, which returns an error message or
  // an empty string; the destination is untouched on error.
  void Add(const char* name, const std::string& value_name, const char* help, std::string def,
           std::function<std::string(const std::string&)> set) {
    const std::string flag = name;
    app_->add_option_function<std::string>(
            flag,
            [flag, set = std::move(set)](const std::string& v) {
              if (std::string error = set(v); !error.empty()) {
                throw CLI::ValidationError(flag + " = '" + v + "'", error);
              }
            },
            help)
        ->type_name(value_name)
        ->default_str(std::move(def));
  }
  static bool ParseNumber(const std::string& v, double* x) {
    char* end = nullptr;
    *x = std::strtod(v.c_str(), &end);
    return !v.empty() && *end == '\0' && std::isfinite(*x);
  }
  static std::string Format(double x) {
    std::ostringstream s;
    s << x;
    return s.str();
  }
  static std::string Range(const char* what, double lo, double hi) {
    return std::string("expected ") + what + " in [" + Format(lo) + ", " + Format(hi) + "]";
  }

  std::string tool_;
  std::unique_ptr<CLI::App> app_;  // a pointer: FlagSet stays movable; Parse is logically const
  mutable bool common_declared_ = false;
};

// The --device choices of every tool.
inline const std::vector<std::string>& DeviceChoices() {
  static const std::vector<std::string> choices = {"auto", "cuda", "cpu"};
  return choices;
}
inline DeviceKind ToDeviceKind(const std::string& name) {
  return name == "cuda" ? DeviceKind::kCuda : name == "cpu" ? DeviceKind::kCpu : DeviceKind::kAuto;
}

}  // namespace attnrt::tools
