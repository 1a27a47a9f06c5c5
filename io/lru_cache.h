// A thread-safe cache of values built from a key, holding up to a byte budget and dropping the least
// recently used first. A value larger than the whole budget is still built and returned (it is what
// was asked for); it is the first to go. Values are shared, so a dropped value lives on while used.
#pragma once
#include <cstdint>
#include <functional>
#include <list>
#include <memory>
#include <mutex>
#include <string>

namespace gnn {

template <class T>
class LruCache {
 public:
  using Build = std::function<T(const std::string&)>;
  using Size = std::function<uint64_t(const T&)>;

  LruCache(uint64_t budget_bytes, Build build, Size size)
      : budget_(budget_bytes), build_(std::move(build)), size_(std::move(size)) {}

  std::shared_ptr<const T> get(const std::string& key) {
    {
      std::lock_guard<std::mutex> lock(mu_);
      for (auto it = lru_.begin(); it != lru_.end(); ++it) {
        if (it->key == key) {
          lru_.splice(lru_.begin(), lru_, it);
          return it->value;
        }
      }
    }
    auto value = std::make_shared<const T>(build_(key));  // outside the lock: builds run in parallel
    const uint64_t bytes = size_(*value);
    std::lock_guard<std::mutex> lock(mu_);
    ++builds_;
    lru_.push_front({key, value, bytes});
    bytes_ += bytes;
    while (bytes_ > budget_ && lru_.size() > 1) {
      bytes_ -= lru_.back().bytes;
      lru_.pop_back();
    }
    return value;
  }

  uint64_t resident_bytes() const {
    std::lock_guard<std::mutex> lock(mu_);
    return bytes_;
  }
  size_t resident() const {
    std::lock_guard<std::mutex> lock(mu_);
    return lru_.size();
  }
  int64_t builds() const {
    std::lock_guard<std::mutex> lock(mu_);
    return builds_;
  }

 private:
  struct Entry {
    std::string key;
    std::shared_ptr<const T> value;
    uint64_t bytes;
  };
  uint64_t budget_;
  Build build_;
  Size size_;
  mutable std::mutex mu_;
  std::list<Entry> lru_;  // most recent first
  uint64_t bytes_ = 0;
  int64_t builds_ = 0;
};

}  // namespace gnn
