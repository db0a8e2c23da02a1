// lru_cache.cpp - a small LRU cache with a hit/miss counter.
#include <cstddef>
#include <list>
#include <optional>
#include <string>
#include <unordered_map>
#include <utility>

namespace cache {

struct Stats {
    std::size_t hits = 0;
    std::size_t misses = 0;
};

template <typename Key, typename Value>
class LruCache {
public:
    explicit LruCache(std::size_t capacity) : capacity_(capacity) {}

    // Look a key up and mark it most recently used.
    std::optional<Value> get(const Key& key) {
        auto it = index_.find(key);
        if (it == index_.end()) {
            ++stats_.misses;
            return std::nullopt;
        }
        order_.splice(order_.begin(), order_, it->second);
        ++stats_.hits;
        return it->second->second;
    }

    void put(const Key& key, Value value) {
        auto it = index_.find(key);
        if (it != index_.end()) {
            it->second->second = std::move(value);
            order_.splice(order_.begin(), order_, it->second);
            return;
        }
        if (order_.size() == capacity_) {
            index_.erase(order_.back().first);
            order_.pop_back();
        }
        order_.emplace_front(key, std::move(value));
        index_[key] = order_.begin();
    }

    const Stats& stats() const { return stats_; }

private:
    using Entry = std::pair<Key, Value>;
    std::size_t capacity_;
    std::list<Entry> order_;
    std::unordered_map<Key, typename std::list<Entry>::iterator> index_;
    Stats stats_;
};

}  // namespace cache

namespace {

const char* kBanner = R"(cache demo { not a block }
)";

}  // namespace

int main()
{
    cache::LruCache<std::string, int> lru(2);
    lru.put("a", 1);
    lru.put("b", 2);
    lru.get("a");
    lru.put("c", 3);
    return lru.get("b").has_value() ? 1 : 0;
}
