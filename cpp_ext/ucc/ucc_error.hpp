// How UCC failures become C++ exceptions (and so Python exceptions).
//
// Every UCC call that can fail goes through check(): a failed status throws
// c10::DistBackendError with one line naming the call and UCC's own words for
// the status, which torch's pybind translator turns into
// torch.distributed.DistBackendError (a RuntimeError) in Python. Arguments
// UCC cannot take are refused (refuse()) before anything reaches UCC, with a
// plain c10::Error (RuntimeError), the type gloo raises for the same mistakes.
#pragma once

#include <exception>
#include <string>

#include <c10/util/Exception.h>
#include <ucc/api/ucc.h>

namespace p2ucc {

// "ucc_team_create_test: Timeout expired (UCC_ERR_TIMED_OUT)".
std::string describe(const char* what, ucc_status_t status);

// Throws c10::DistBackendError when status is an error (< 0); returns it otherwise.
ucc_status_t check(ucc_status_t status, const char* what);

// The first line of an exception's message (c10 errors append a C++ backtrace).
std::string first_line(const std::exception& error);

// A mistake in the caller's arguments (a dtype UCC cannot reduce, wrong sizes,
// send/recv): throws c10::Error, i.e. RuntimeError in Python, as gloo does for the same.
[[noreturn]] void refuse(const std::string& message);

// A failure of UCC or of the peers: throws c10::DistBackendError carrying message (one line).
[[noreturn]] void fail(const std::string& message);

// The exception fail(message) would throw, as an exception_ptr (to complete a Work with).
std::exception_ptr error_ptr(const std::string& message);

}  // namespace p2ucc
