// Command-line flags of the tools (examples and benchmarks share it: attnrt_flags). A tool
// declares each flag once (name, destination, help, range); parsing, --help (with the defaults)
// and error messages naming the flag and the value all come from those declarations, so the help
// cannot drift from the parser. Every tool also answers --version (the library's version) and
// takes --log-level (the library's logger).
#pragma once

#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <limits>
#include <sstream>
#include <string>
#include <type_traits>
#include <vector>

#include <attnrt/log.h>
#include <attnrt/runtime.h>
#include <attnrt/version.h>

namespace attnrt::tools {

class FlagSet {
 public:
  // `summary`: the first line(s) of --help.
  FlagSet(std::string tool, std::string summary)
      : tool_(std::move(tool)), summary_(std::move(summary)) {}

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
    Add(name, "S", help, *dst, [=](const std::string& v) {
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
    Add(name, all.c_str(), help, *dst, [=](const std::string& v) {
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
    flags_.push_back({name, "", help, "", true, [=](const std::string&) {
                        *dst = true;
                        return std::string();
                      }});
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
  void Footer(std::string text) { footer_ = std::move(text); }

  // kContinue to go on; otherwise the exit code: 0 after --help, 2 after an error (printed).
  static constexpr int kContinue = -1;
  int Parse(int argc, char** argv) const {
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
      if (a == "--log-level") {
        if (i + 1 >= argc) {
          std::fprintf(stderr, "%s: %s needs a value (see --help)\n", tool_.c_str(), a.c_str());
          return 2;
        }
        const std::string level = argv[++i];
        if (const Status s = SetLogLevel(level); !s.ok()) {
          std::fprintf(stderr, "%s: %s = '%s': %s\n", tool_.c_str(), a.c_str(), level.c_str(),
                       s.message().c_str());
          return 2;
        }
        continue;
      }
      const Flag* f = Find(a);
      if (f == nullptr) {
        std::fprintf(stderr, "%s: unknown option %s (see --help)\n", tool_.c_str(), a.c_str());
        return 2;
      }
      std::string value;
      if (!f->is_switch) {
        if (i + 1 >= argc) {
          std::fprintf(stderr, "%s: %s needs a value (see --help)\n", tool_.c_str(), a.c_str());
          return 2;
        }
        value = argv[++i];
      }
      const std::string error = f->set(value);
      if (!error.empty()) {
        std::fprintf(stderr, "%s: %s = '%s': %s\n", tool_.c_str(), a.c_str(), value.c_str(),
                     error.c_str());
        return 2;
      }
    }
    return kContinue;
  }

  void PrintHelp() const {
    std::printf("%s\n\n", summary_.c_str());
    for (const Flag& f : flags_) {
      std::string left = "  " + f.name + (f.value_name.empty() ? "" : " " + f.value_name);
      if (left.size() < 28) left.resize(28, ' ');
      std::printf("%s %s%s\n", left.c_str(), f.help.c_str(),
                  f.is_switch || f.default_value.empty() ? ""
                                                         : (" (" + f.default_value + ")").c_str());
    }
    std::printf("  %-26s the library's log level: %s (SPDLOG_LEVEL, else info)\n",
                "--log-level LEVEL", std::string(kLogLevelNames).c_str());
    std::printf("  %-26s the tool's and the library's version\n", "--version");
    std::printf("  %-26s this text\n", "--help");
    if (!footer_.empty()) std::printf("\n%s\n", footer_.c_str());
  }

 private:
  struct Flag {
    std::string name, value_name, help, default_value;
    bool is_switch = false;
    std::function<std::string(const std::string&)> set;  // empty string: accepted
  };

  void Add(const char* name, const char* value_name, const char* help, std::string def,
           std::function<std::string(const std::string&)> set) {
    flags_.push_back({name, value_name, help, std::move(def), false, std::move(set)});
  }
  const Flag* Find(const std::string& name) const {
    for (const Flag& f : flags_) {
      if (f.name == name) return &f;
    }
    return nullptr;
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

  std::string tool_, summary_, footer_;
  std::vector<Flag> flags_;
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
