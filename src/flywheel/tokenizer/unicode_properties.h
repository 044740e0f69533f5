// The two Unicode classes the added-token rules of Hugging Face tokenizers test (written there
// as Rust regex's \s and \w): White_Space, and word characters (UTS #18 Annex C: Alphabetic,
// marks, decimal numbers, connector punctuation, Join_Control). Backed by ICU.
#ifndef FLYWHEEL_TOKENIZER_UNICODE_PROPERTIES_H_
#define FLYWHEEL_TOKENIZER_UNICODE_PROPERTIES_H_

namespace flywheel {

bool IsWhiteSpace(char32_t c);
bool IsWordChar(char32_t c);

}  // namespace flywheel

#endif  // FLYWHEEL_TOKENIZER_UNICODE_PROPERTIES_H_
