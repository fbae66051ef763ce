// The version calls (C++ and C) agree with <attnrt/version.h>, and the library's log level can be
// set by name through <attnrt/log.h> and the C interface, with bad names refused by name.
#include <attnrt/log.h>

#include <gtest/gtest.h>
#include <spdlog/spdlog.h>

#include <cstring>
#include <string>

#include <attnrt/c_api.h>
#include <attnrt/version.h>

namespace attnrt {
namespace {

TEST(VersionTest, RuntimeVersionIsTheHeadersVersion) {
  EXPECT_STREQ(Version(), ATTNRT_VERSION_STRING);
  EXPECT_STREQ(attnrt_version(), ATTNRT_VERSION_STRING);
  const std::string expected = std::to_string(ATTNRT_VERSION_MAJOR) + "." +
                               std::to_string(ATTNRT_VERSION_MINOR) + "." +
                               std::to_string(ATTNRT_VERSION_PATCH);
  EXPECT_EQ(expected, ATTNRT_VERSION_STRING);
  EXPECT_EQ(ATTNRT_VERSION_NUMBER,
            ATTNRT_VERSION_MAJOR * 10000 + ATTNRT_VERSION_MINOR * 100 + ATTNRT_VERSION_PATCH);
}

TEST(LogLevelTest, SetsTheNamedLoggerAndRefusesUnknownNames) {
  ASSERT_TRUE(SetLogLevel("debug").ok());
  std::shared_ptr<spdlog::logger> logger = spdlog::get("attnrt");
  ASSERT_NE(logger, nullptr);
  EXPECT_EQ(logger->level(), spdlog::level::debug);
  ASSERT_TRUE(SetLogLevel("off").ok());
  EXPECT_EQ(logger->level(), spdlog::level::off);

  const Status bad = SetLogLevel("loud");
  EXPECT_EQ(bad.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(bad.message().find("'loud'"), std::string::npos) << bad.message();
  EXPECT_EQ(logger->level(), spdlog::level::off);  // unchanged

  char error[128] = "";
  EXPECT_EQ(attnrt_set_log_level("warn", error, sizeof(error)), ATTNRT_OK);
  EXPECT_EQ(logger->level(), spdlog::level::warn);
  EXPECT_EQ(attnrt_set_log_level("verbose", error, sizeof(error)), ATTNRT_INVALID_ARGUMENT);
  EXPECT_NE(std::strstr(error, "'verbose'"), nullptr) << error;
  EXPECT_EQ(attnrt_set_log_level(nullptr, error, sizeof(error)), ATTNRT_INVALID_ARGUMENT);
  ASSERT_TRUE(SetLogLevel("info").ok());
}

}  // namespace
}  // namespace attnrt
