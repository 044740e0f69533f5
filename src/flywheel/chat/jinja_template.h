// A parsed Jinja template and its renderer: the subset of Jinja2 that chat templates use, with
// the environment transformers renders them in (ImmutableSandboxedEnvironment, trim_blocks,
// lstrip_blocks, loop controls, its tojson, raise_exception and strftime_now).
//
//   auto t = jinja::Template::Parse(source);          // syntax errors and unsupported constructs
//   std::string text = *t->Render(variables, options); // runtime errors: "line 12: …"
//
// Scoping follows Jinja2: every iteration of a for loop is a new scope whose `set`s are gone
// after it (namespace() carries state out), `if` bodies share their enclosing scope, macros see
// the scope they were defined in. Undefined names and missing keys are Jinja's Undefined: they
// print as "", are false, iterate as empty; any other use is an error that names them.
#ifndef FLYWHEEL_CHAT_JINJA_TEMPLATE_H_
#define FLYWHEEL_CHAT_JINJA_TEMPLATE_H_

#include <functional>
#include <memory>
#include <string>
#include <string_view>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "flywheel/chat/jinja_ast.h"
#include "flywheel/chat/jinja_value.h"

namespace flywheel::jinja {

struct RenderOptions {
  // strftime_now(format) reads this clock, in `time_zone` (transformers uses datetime.now(), the
  // host's local time). Null: absl::Now().
  std::function<absl::Time()> now;
  absl::TimeZone time_zone = absl::LocalTimeZone();
};

class Template {
 public:
  static absl::StatusOr<Template> Parse(std::string_view source);

  // `variables` are the template's globals (messages, tools, add_generation_prompt, …); they
  // shadow the built-in globals range, namespace, dict, raise_exception and strftime_now.
  // raise_exception(msg) fails the render with an InvalidArgument status "… raise_exception:
  // msg"; other errors name the template line.
  absl::StatusOr<std::string> Render(const ValueDict& variables,
                                     const RenderOptions& options = {}) const;

 private:
  explicit Template(std::shared_ptr<const Body> body) : body_(std::move(body)) {}
  std::shared_ptr<const Body> body_;
};

}  // namespace flywheel::jinja

#endif  // FLYWHEEL_CHAT_JINJA_TEMPLATE_H_
