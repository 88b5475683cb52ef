#include "ucc_lib.hpp"

#include <atomic>

#include "ucc_error.hpp"

namespace p2ucc {

namespace {
std::atomic<uint64_t> libs_made{0};
}

Lib::Lib() : env_prefix_("P2UCC" + std::to_string(libs_made++)) {
  ucc_lib_config_h config = nullptr;
  check(ucc_lib_config_read(env_prefix_.c_str(), nullptr, &config), "ucc_lib_config_read");
  ucc_lib_params_t params{};
  params.mask = UCC_LIB_PARAM_FIELD_THREAD_MODE;
  params.thread_mode = UCC_THREAD_FUNNELED;
  ucc_status_t status = ucc_init(&params, config, &lib_);
  ucc_lib_config_release(config);
  check(status, "ucc_init");
}

Lib::~Lib() {
  if (lib_ != nullptr) ucc_finalize(lib_);
}

std::string Lib::version() {
  return ucc_get_version_string();
}

}  // namespace p2ucc
