#pragma once
// The paged KV cache of one rank on the CPU: per layer, K and V in fp32 as [num_blocks, block_size, num_kv_heads,
// head_dim]. A sequence's position p lives in block block_table[p / block_size], slot p % block_size; the
// engine core's block manager owns the allocation, this class only stores. Multi-head latent attention keeps
// one "head" per token (the latent and the rope key, model_config::kv_width() floats) in K and no V.

#include <cstddef>
#include <cstdint>
#include <vector>

namespace zmoe {

struct model_config;

class kv_cache {
  public:
    kv_cache(int64_t num_layers, int64_t num_blocks, int64_t block_size, int64_t num_kv_heads, int64_t head_dim,
             bool with_v = true);
    /// The cache `config` needs: [num_kv_heads, head_dim] K and V, or with MLA one [kv_width()] K row and no V.
    static kv_cache for_model(const model_config& config, int64_t num_blocks, int64_t block_size);

    int64_t num_layers() const { return num_layers_; }
    int64_t num_blocks() const { return num_blocks_; }
    int64_t block_size() const { return block_size_; }
    int64_t num_kv_heads() const { return num_kv_heads_; }
    int64_t head_dim() const { return head_dim_; }
    bool has_v() const { return with_v_; }  ///< false: v() must not be used

    /// K (or V) of `layer` at (block, slot): [num_kv_heads, head_dim].
    float* k(int64_t layer, int64_t block, int64_t slot) { return at(k_, layer, block, slot); }
    float* v(int64_t layer, int64_t block, int64_t slot) { return at(v_, layer, block, slot); }
    const float* k(int64_t layer, int64_t block, int64_t slot) const { return at(k_, layer, block, slot); }
    const float* v(int64_t layer, int64_t block, int64_t slot) const { return at(v_, layer, block, slot); }

    /// Bytes one block takes over all layers, K and V (MLA: the latent and rope key only).
    static int64_t bytes_per_block(const model_config& config, int64_t block_size);
    /// How many blocks fit in `budget_bytes` (0 if not one).
    static int64_t blocks_for_budget(const model_config& config, int64_t block_size, int64_t budget_bytes);

  private:
    float* at(std::vector<float>& buf, int64_t layer, int64_t block, int64_t slot) {
        return buf.data() + offset(layer, block, slot);
    }
    const float* at(const std::vector<float>& buf, int64_t layer, int64_t block, int64_t slot) const {
        return buf.data() + offset(layer, block, slot);
    }
    size_t offset(int64_t layer, int64_t block, int64_t slot) const {
        return static_cast<size_t>(((layer * num_blocks_ + block) * block_size_ + slot) * num_kv_heads_ * head_dim_);
    }

    int64_t num_layers_, num_blocks_, block_size_, num_kv_heads_, head_dim_;
    bool with_v_ = true;
    std::vector<float> k_;
    std::vector<float> v_;
};

}  // namespace zmoe
