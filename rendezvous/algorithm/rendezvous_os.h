// What the rendezvous asks of the operating system, behind one small
// interface (as leveldb's Env): whether an address names this machine, a
// free port, the host name and the process id. The algorithm reads them
// through it, so its unit tests run with a fake and no socket.
#pragma once

#include <memory>
#include <string>

namespace dtrun::rendezvous {

class rendezvous_os {
 public:
  virtual ~rendezvous_os() = default;

  // True when `host` names this machine: localhost, a loopback or local
  // interface address, the host name or a name resolving to one of ours.
  virtual bool is_this_machine(const std::string& host) const = 0;
  // A free TCP port on `addr` (any interface when it is not an address),
  // found by binding port 0 and letting it go; 0 when none. Another process
  // may take it before the worker binds it (torchrun has the same race).
  virtual int reserve_port(const std::string& addr) const = 0;
  virtual std::string host_name() const = 0;
  virtual long pid() const = 0;
};

// The real one: getifaddrs, the resolver, bind, gethostname, getpid.
std::shared_ptr<const rendezvous_os> system_rendezvous_os();

// system_rendezvous_os()->is_this_machine(host), for the launcher.
bool is_this_machine(const std::string& host);

}  // namespace dtrun::rendezvous
