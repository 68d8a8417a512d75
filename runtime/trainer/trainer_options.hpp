// Trainer options from JSON with slime's names (rl.trainer.new's table, encoded).
#pragma once
#include <nlohmann/json.hpp>

#include "trainer/trainer.hpp"

namespace rl::trainer {

// Throws std::invalid_argument naming an unknown key (with the closest known
// one) or a value of the wrong type.
TrainerOptions trainer_options_from_json(const nlohmann::json& j);

}  // namespace rl::trainer
