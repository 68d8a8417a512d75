// Chat templates: parse once into a syntax tree (jinja_parser.cpp), render per
// call with a fresh evaluator (jinja_eval.cpp), so one ChatTemplate can render
// from many threads.
#include "model/chat_template.hpp"

#include "model/jinja_ast.hpp"
#include "model/jinja_eval.hpp"

namespace rl::model {

struct ChatTemplate::Impl {
  std::string name;
  jinja::Body body;

  template <class Json>
  std::string render(const Json& context) const {
    if (!context.is_object() && !context.is_null())
      throw std::runtime_error(name + ": the render context must be a JSON object of template variables, got " +
                               std::string(context.type_name()));
    jinja::DictData vars;
    try {
      if (context.is_object())
        for (auto it = context.begin(); it != context.end(); ++it) vars.set(it.key(), jinja::from_json(it.value()));
    } catch (const jinja::EvalError& e) {
      throw std::runtime_error(name + ": context: " + e.what());
    }
    jinja::Evaluator ev(name);
    return ev.render(body, std::move(vars));
  }
};

ChatTemplate::ChatTemplate(const std::string& source, const std::string& name) : impl_(std::make_unique<Impl>()) {
  impl_->name = name;
  impl_->body = jinja::parse_template(source, impl_->name);
}

ChatTemplate::~ChatTemplate() = default;
ChatTemplate::ChatTemplate(ChatTemplate&&) noexcept = default;
ChatTemplate& ChatTemplate::operator=(ChatTemplate&&) noexcept = default;

const std::string& ChatTemplate::name() const { return impl_->name; }

std::string ChatTemplate::render(const nlohmann::json& context) const { return impl_->render(context); }
std::string ChatTemplate::render(const nlohmann::ordered_json& context) const { return impl_->render(context); }

}  // namespace rl::model
