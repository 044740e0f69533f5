// The filters, tests, methods and attribute rules of Jinja2 and Python that chat templates use.
//
//   filters  abs capitalize count d default dictsort first float indent int items join last
//            length list lower map max min reject rejectattr replace reverse round safe select
//            selectattr sort string sum title tojson trim unique upper
//   tests    boolean callable defined divisibleby eq equalto even false float ge gt in integer
//            iterable le lower lt mapping ne none number odd sameas sequence string true
//            undefined upper
//   methods  str: startswith endswith strip lstrip rstrip split rsplit replace upper lower title
//                 capitalize find count join
//            dict: items keys values get
//
// `tojson` is transformers' (json.dumps with ensure_ascii=False), not Jinja's HTML-safe one.
#ifndef FLYWHEEL_CHAT_JINJA_BUILTINS_H_
#define FLYWHEEL_CHAT_JINJA_BUILTINS_H_

#include <string_view>

#include "absl/status/statusor.h"
#include "flywheel/chat/jinja_value.h"

namespace flywheel::jinja {

bool IsKnownFilter(std::string_view name);
bool IsKnownTest(std::string_view name);

absl::StatusOr<Value> ApplyFilter(std::string_view name, const Value& input, CallArgs args);
absl::StatusOr<bool> ApplyTest(std::string_view name, const Value& input, const CallArgs& args);

// `object.name` with Jinja's rule: a Python attribute first (str and dict methods, bound to the
// object), then the item. A missing one is undefined (with Jinja's hint for the message);
// attributes of an undefined value are an error.
absl::StatusOr<Value> GetAttribute(const Value& object, std::string_view name);

// `object[key]`: the item first, then a string key as an attribute. An index out of range or a
// missing key is undefined.
absl::StatusOr<Value> GetItem(const Value& object, const Value& key);

// Python iteration: a list's items, a dict's keys, a string's characters; undefined is empty.
absl::StatusOr<ValueList> Iterate(const Value& value);

// `a in b`.
absl::StatusOr<bool> Contains(const Value& container, const Value& item);

}  // namespace flywheel::jinja

#endif  // FLYWHEEL_CHAT_JINJA_BUILTINS_H_
