#include "workers/kv_cache.hpp"

#include "base/check.hpp"
#include "model/model_config.hpp"

namespace zmoe {

kv_cache::kv_cache(int64_t num_layers, int64_t num_blocks, int64_t block_size, int64_t num_kv_heads, int64_t head_dim,
                   bool with_v)
    : num_layers_(num_layers),
      num_blocks_(num_blocks),
      block_size_(block_size),
      num_kv_heads_(num_kv_heads),
      head_dim_(head_dim),
      with_v_(with_v) {
    ZMOE_CHECK(num_layers > 0 && num_blocks >= 0 && block_size > 0 && num_kv_heads > 0 && head_dim > 0,
               "kv_cache shape");
    const size_t n = static_cast<size_t>(num_layers * num_blocks * block_size * num_kv_heads * head_dim);
    k_.assign(n, 0.f);
    if (with_v) v_.assign(n, 0.f);
}

kv_cache kv_cache::for_model(const model_config& config, int64_t num_blocks, int64_t block_size) {
    if (config.is_mla()) return kv_cache(config.num_layers, num_blocks, block_size, 1, config.kv_width(), false);
    return kv_cache(config.num_layers, num_blocks, block_size, config.num_kv_heads, config.head_dim);
}

int64_t kv_cache::bytes_per_block(const model_config& config, int64_t block_size) {
    return (config.is_mla() ? 1 : 2) * config.num_layers * block_size * config.kv_width() *
           static_cast<int64_t>(sizeof(float));
}

int64_t kv_cache::blocks_for_budget(const model_config& config, int64_t block_size, int64_t budget_bytes) {
    if (budget_bytes <= 0) return 0;
    return budget_bytes / bytes_per_block(config, block_size);
}

}  // namespace zmoe
