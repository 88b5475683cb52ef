#include "ucc_error.hpp"

namespace p2ucc {

namespace {

const char* status_name(ucc_status_t status) {
  switch (status) {
    case UCC_ERR_NOT_SUPPORTED: return "UCC_ERR_NOT_SUPPORTED";
    case UCC_ERR_NOT_IMPLEMENTED: return "UCC_ERR_NOT_IMPLEMENTED";
    case UCC_ERR_INVALID_PARAM: return "UCC_ERR_INVALID_PARAM";
    case UCC_ERR_NO_MEMORY: return "UCC_ERR_NO_MEMORY";
    case UCC_ERR_NO_RESOURCE: return "UCC_ERR_NO_RESOURCE";
    case UCC_ERR_NO_MESSAGE: return "UCC_ERR_NO_MESSAGE";
    case UCC_ERR_NOT_FOUND: return "UCC_ERR_NOT_FOUND";
    case UCC_ERR_TIMED_OUT: return "UCC_ERR_TIMED_OUT";
    default: return "UCC error";
  }
}

}  // namespace

std::string describe(const char* what, ucc_status_t status) {
  return std::string(what) + ": " + ucc_status_string(status) + " (" + status_name(status) + ")";
}

ucc_status_t check(ucc_status_t status, const char* what) {
  if (status < 0) fail(describe(what, status));
  return status;
}

std::string first_line(const std::exception& error) {
  std::string text = error.what();
  return text.substr(0, text.find('\n'));
}

void refuse(const std::string& message) {
  C10_THROW_ERROR(Error, message);
}

void fail(const std::string& message) {
  C10_THROW_ERROR(DistBackendError, message);
}

std::exception_ptr error_ptr(const std::string& message) {
  try {
    fail(message);
  } catch (...) {
    return std::current_exception();
  }
}

}  // namespace p2ucc
