#pragma once
// Runs a block of a test with the decode-step kernel variants set (decode_tuning.hpp), restoring the previous ones.

#include "kernels/decode_tuning.hpp"

namespace zmoe::kernels::test {

class tuning_scope {
  public:
    explicit tuning_scope(const decode_tuning& t) : before_(current_decode_tuning()) { set_decode_tuning(t); }
    ~tuning_scope() { set_decode_tuning(before_); }
    tuning_scope(const tuning_scope&) = delete;
    tuning_scope& operator=(const tuning_scope&) = delete;

  private:
    decode_tuning before_;
};

}  // namespace zmoe::kernels::test
