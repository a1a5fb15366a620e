#include "rendezvous/store/memory_round_store.h"

#include <algorithm>
#include <deque>
#include <functional>
#include <utility>

#include <boost/asio/post.hpp>
#include <boost/asio/steady_timer.hpp>
#include <fmt/format.h>

#include "rendezvous/store/store.h"
#include "rendezvous/store/store_semantics.h"

namespace dtrun::rendezvous {

namespace asio = boost::asio;

struct will_record {
  const memory_round_client* owner = nullptr;
  std::string target, value;
};

struct memory_round_server::state {
  std::map<std::string, std::string> values;
  std::map<std::string, will_record> wills;
  std::vector<std::weak_ptr<memory_round_client>> clients;
  std::vector<std::string> journal;

  bool has_all(const std::vector<std::string>& keys) const {
    return std::all_of(keys.begin(), keys.end(),
                       [this](const std::string& k) { return values.count(k) != 0; });
  }
  // A key changed: every client whose head waits retries it, from the loop.
  void changed(asio::io_context& io);
};

class memory_round_client final : public round_store,
                                  public std::enable_shared_from_this<memory_round_client> {
 public:
  memory_round_client(asio::io_context& io, std::shared_ptr<memory_round_server::state> state,
                      std::string address)
      : io_(io), state_(std::move(state)), address_(std::move(address)), timer_(io) {}

  void connect(store_callback done) override { enqueue({}, {}, [] { return store_result{}; }, done); }

  void set(std::string key, std::string value, store_callback done) override {
    enqueue({}, {}, [this, key, value] {
      write(key, value);
      return store_result{};
    }, done);
  }

  void multi_set(std::vector<std::string> keys, std::vector<std::string> values,
                 store_callback done) override {
    enqueue({}, {}, [this, keys, values] {
      for (std::size_t i = 0; i < keys.size() && i < values.size(); ++i) write(keys[i], values[i]);
      return store_result{};
    }, done);
  }

  void get(std::string key, store_duration timeout, store_callback done) override {
    enqueue({key}, timeout, [this, key] {
      store_result r;
      r.value = state_->values.at(key);
      return r;
    }, done);
  }

  void add(std::string key, std::int64_t delta, store_callback done) override {
    enqueue({}, {}, [this, key, delta] {
      store_result r;
      auto it = state_->values.find(key);
      auto sum = add_to_counter(it == state_->values.end() ? nullptr : &it->second, delta);
      if (!sum) {
        r.fail(store_error_ptr(fmt::format("add: the value of key '{}' is not a number", key)));
        return r;
      }
      r.number = *sum;
      write(key, std::to_string(*sum));
      return r;
    }, done);
  }

  void compare_set(std::string key, std::string expected, std::string desired,
                   store_callback done) override {
    enqueue({}, {}, [this, key, expected, desired] {
      auto it = state_->values.find(key);
      auto outcome =
          decide_compare_set(it == state_->values.end() ? nullptr : &it->second, expected, desired);
      if (outcome.store_desired) write(key, desired);
      store_result r;
      r.value = outcome.reply;
      return r;
    }, done);
  }

  void check(std::vector<std::string> keys, store_callback done) override {
    enqueue({}, {}, [this, keys] {
      store_result r;
      r.flag = state_->has_all(keys);
      return r;
    }, done);
  }

  void wait(std::vector<std::string> keys, store_duration timeout, store_callback done) override {
    enqueue(keys, timeout, [] { return store_result{}; }, done);
  }

  void delete_key(std::string key, store_callback done) override {
    enqueue({}, {}, [this, key] {
      store_result r;
      r.flag = state_->values.erase(key) != 0;
      state_->journal.push_back("delete " + key);
      return r;
    }, done);
  }

  void multi_get(std::vector<std::string> keys, store_duration timeout,
                 store_callback done) override {
    enqueue(keys, timeout, [this, keys] { return read(keys); }, done);
  }

  void read_now(std::vector<std::string> keys, store_callback done) override {
    enqueue({}, {}, [this, keys] { return read(keys); }, done);
  }

  void set_will(std::string will, std::string target, std::string value,
                store_callback done) override {
    enqueue({}, {}, [this, will, target, value] {
      state_->wills[will] = will_record{this, target, value};
      return store_result{};
    }, done);
  }

  void withdraw_will(std::string will, store_callback done) override {
    enqueue({}, {}, [this, will] {
      auto it = state_->wills.find(will);
      if (it != state_->wills.end() && it->second.owner == this) state_->wills.erase(it);
      return store_result{};
    }, done);
  }

  void close() override {
    if (std::exchange(closed_, true)) return;
    ++armed_;
    timer_.cancel();
    while (!queue_.empty()) {
      post(std::move(queue_.front().done), connection_lost());
      queue_.pop_front();
    }
    execute_wills();
  }

  std::string local_address() const override { return address_; }

  // Applies what can be applied, in order, up to the first operation whose
  // keys are not all there yet.
  void pump() {
    while (!closed_ && !queue_.empty()) {
      auto& head = queue_.front();
      if (!state_->has_all(head.awaited)) return arm(head);
      ++armed_;
      timer_.cancel();
      auto result = head.apply();
      post(std::move(head.done), std::move(result));
      queue_.pop_front();
    }
  }

 private:
  struct operation {
    std::vector<std::string> awaited;  // keys that must exist first
    store_duration timeout{};          // for them
    std::function<store_result()> apply;
    store_callback done;
    bool armed = false;
  };

  void enqueue(std::vector<std::string> awaited, store_duration timeout,
               std::function<store_result()> apply, store_callback done) {
    if (closed_) return post(std::move(done), connection_lost());
    queue_.push_back({std::move(awaited), timeout, std::move(apply), std::move(done)});
    if (queue_.size() == 1) pump();
  }

  // The head waits for its keys: its timeout starts now (not at the call:
  // the c10d server starts a WAIT's clock when it reaches it too).
  void arm(operation& head) {
    if (head.armed || head.timeout >= no_timeout) return;
    head.armed = true;
    timer_.expires_after(std::max(head.timeout, store_duration::zero()));
    timer_.async_wait([weak = weak_from_this(), armed = ++armed_](
                          const boost::system::error_code& ec) {
      auto self = weak.lock();
      if (ec || !self || armed != self->armed_ || self->queue_.empty()) return;
      auto keys = self->queue_.front().awaited;
      self->post(std::move(self->queue_.front().done),
                 store_result::failed(std::make_exception_ptr(store_wait_timeout(
                     fmt::format("wait for {} timed out", quoted_keys(keys))))));
      self->queue_.pop_front();
      self->pump();
    });
  }

  void write(const std::string& key, const std::string& value) {
    state_->values[key] = value;
    state_->journal.push_back("set " + key);
    state_->changed(io_);
  }

  store_result read(const std::vector<std::string>& keys) const {
    store_result r;
    for (const auto& k : keys) {
      auto it = state_->values.find(k);
      r.values.push_back(it == state_->values.end() ? std::string() : it->second);
    }
    return r;
  }

  void execute_wills() {
    for (auto it = state_->wills.begin(); it != state_->wills.end();) {
      if (it->second.owner != this) {
        ++it;
        continue;
      }
      // The first reason wins, as on the TCPStore server
      // (store_session::execute_wills): a will does not overwrite a
      // target that already says something.
      auto now = state_->values.find(it->second.target);
      if (now == state_->values.end() || now->second.empty()) {
        write(it->second.target, it->second.value);
      }
      it = state_->wills.erase(it);
    }
  }

  // Only close() ends this client: a close of our own.
  static store_result connection_lost() {
    return store_result::failed(std::make_exception_ptr(
        store_closed_error("the connection to the store was closed")));
  }

  void post(store_callback done, store_result result) {
    if (!done) return;
    asio::post(io_, [done = std::move(done), result = std::move(result)] { done(result); });
  }

  asio::io_context& io_;
  std::shared_ptr<memory_round_server::state> state_;
  std::string address_;
  asio::steady_timer timer_;
  std::deque<operation> queue_;
  std::uint64_t armed_ = 0;
  bool closed_ = false;
};

void memory_round_server::state::changed(asio::io_context& io) {
  for (auto& weak : clients) {
    asio::post(io, [weak] {
      if (auto c = weak.lock()) c->pump();
    });
  }
}

memory_round_server::memory_round_server(asio::io_context& io)
    : io_(io), state_(std::make_shared<state>()) {}

memory_round_server::~memory_round_server() = default;

std::shared_ptr<round_store> memory_round_server::client(std::string address) {
  auto c = std::make_shared<memory_round_client>(io_, state_, std::move(address));
  std::erase_if(state_->clients, [](const auto& w) { return w.expired(); });
  state_->clients.push_back(c);
  return c;
}

std::optional<std::string> memory_round_server::value(const std::string& key) const {
  auto it = state_->values.find(key);
  if (it == state_->values.end()) return std::nullopt;
  return it->second;
}

void memory_round_server::set(const std::string& key, const std::string& value) {
  state_->values[key] = value;
  state_->journal.push_back("set " + key);
  state_->changed(io_);
}

const std::vector<std::string>& memory_round_server::journal() const { return state_->journal; }

}  // namespace dtrun::rendezvous
