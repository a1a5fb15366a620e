// Closes a file descriptor when the scope that opened it ends, on every
// return path.
#pragma once

#include <unistd.h>

namespace dtrun::agent {

struct fd_closer {
  int fd;  // -1: nothing to close (an open that failed)
  ~fd_closer() {
    if (fd >= 0) ::close(fd);
  }
};

}  // namespace dtrun::agent
