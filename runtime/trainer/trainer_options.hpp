// Trainer options from JSON with slime's names (rl.trainer.new's table, encoded).
#pragma once
#include <nlohmann/json.hpp>

#include "trainer/trainer.hpp"

namespace rl::trainer {

// Throws std::invalid_argument naming an unknown key (with the closest known
// one) or a value of the wrong type.
TrainerOptions trainer_options_from_json(const nlohmann::json& j);

// The options as that JSON (slime's names; an unset optional is null): what
// trainer_options_from_json reads back. lua/rl/trainer/options.lua declares the same
// names and defaults; tests/lua/trainer_spec.lua compares them through this.
nlohmann::json trainer_options_to_json(const TrainerOptions& o);

}  // namespace rl::trainer
