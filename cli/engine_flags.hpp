#pragma once
// The engine flags on a command line: serve, generate and engine-core register every flag of the one engine
// configuration (messages/engine_config.hpp) and parse it once into an engine_config. serve/generate hand that
// configuration to the engine-core process (engine_config_args); the engine core sends it to every worker in
// the welcome.

#include <boost/program_options.hpp>

#include "messages/engine_config.hpp"

namespace zmoe::cli {

/// Registers every engine flag on `d`, bound to the fields of `c` (defaults: c's current values).
void add_engine_options(boost::program_options::options_description& d, engine_config& c);

/// With --device cuda and no --workers given: one worker per visible GPU, counted without initialising CUDA
/// (CUDA_VISIBLE_DEVICES, else /proc/driver/nvidia/gpus), so the launching process can still fork+exec.
void default_workers_to_gpus(engine_config& c, const boost::program_options::variables_map& vm);

}  // namespace zmoe::cli
