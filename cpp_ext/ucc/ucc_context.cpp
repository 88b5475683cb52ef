#include "ucc_context.hpp"

#include <cstdlib>
#include <mutex>
#include <utility>
#include <vector>

#include "ucc_error.hpp"

namespace p2ucc {

namespace {

std::mutex& environment_lock() {
  static std::mutex lock;
  return lock;
}

// Sets <prefix>_UCC_UCX_<name>=value for one scope (nothing for an empty value).
class ScopedUcxSetting {
 public:
  ScopedUcxSetting(const std::string& lib_prefix, const char* name, const std::string& value) {
    if (value.empty()) return;
    name_ = lib_prefix + "_UCC_UCX_" + name;
    setenv(name_.c_str(), value.c_str(), 1);
  }
  ~ScopedUcxSetting() {
    if (!name_.empty()) unsetenv(name_.c_str());
  }
  ScopedUcxSetting(const ScopedUcxSetting&) = delete;
  ScopedUcxSetting& operator=(const ScopedUcxSetting&) = delete;

 private:
  std::string name_;
};

}  // namespace

Context::Context(std::shared_ptr<Lib> lib, std::shared_ptr<StoreOob> oob, ContextOptions options)
    : lib_(std::move(lib)), oob_(std::move(oob)), options_(std::move(options)) {
  ucc_context_config_h config = nullptr;
  check(ucc_context_config_read(lib_->handle(), nullptr, &config), "ucc_context_config_read");
  ucc_context_params_t params{};
  params.mask = UCC_CONTEXT_PARAM_FIELD_TYPE;
  params.type = UCC_CONTEXT_EXCLUSIVE;
  if (oob_) {
    params.mask |= UCC_CONTEXT_PARAM_FIELD_OOB;
    params.oob = oob_->coll();
  }
  ucc_status_t status;
  {
    std::lock_guard<std::mutex> guard(environment_lock());
    ScopedUcxSetting devices(lib_->env_prefix(), "NET_DEVICES", options_.net_devices);
    ScopedUcxSetting transports(lib_->env_prefix(), "TLS", options_.transports);
    status = ucc_context_create(lib_->handle(), &params, config, &context_);
  }
  ucc_context_config_release(config);
  if (status < 0) {
    std::string message = describe("ucc_context_create", status);
    if (oob_ && !oob_->last_error().empty()) message += ": " + oob_->last_error();
    if (!options_.net_devices.empty()) message += " (NET_DEVICES=" + options_.net_devices + ")";
    fail(message);
  }
}

Context::~Context() {
  if (context_ != nullptr) ucc_context_destroy(context_);
}

ucc_status_t Context::progress() {
  return ucc_context_progress(context_);
}

}  // namespace p2ucc
