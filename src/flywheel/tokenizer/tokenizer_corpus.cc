#include "flywheel/tokenizer/tokenizer_corpus.h"

#include <array>
#include <random>
#include <string_view>

#include "flywheel/core/strings.h"
#include "flywheel/tokenizer/utf8.h"

namespace flywheel {
namespace {

// std::mt19937_64 is specified exactly; the distributions of <random> are not, so draws are
// reduced by hand to stay the same on every standard library.
class Rng {
 public:
  explicit Rng(uint64_t seed) : engine_(seed) {}
  size_t Below(size_t n) { return static_cast<size_t>(engine_() % n); }
  size_t Between(size_t lo, size_t hi) { return lo + Below(hi - lo + 1); }  // inclusive
  bool Chance(size_t percent) { return Below(100) < percent; }
  template <typename T, size_t N>
  const T& Pick(const std::array<T, N>& items) {
    return items[Below(N)];
  }

 private:
  std::mt19937_64 engine_;
};

constexpr std::array<std::string_view, 96> kWords = {"the",
                                                     "of",
                                                     "and",
                                                     "to",
                                                     "in",
                                                     "is",
                                                     "that",
                                                     "for",
                                                     "it",
                                                     "as",
                                                     "was",
                                                     "with",
                                                     "be",
                                                     "by",
                                                     "on",
                                                     "not",
                                                     "he",
                                                     "this",
                                                     "are",
                                                     "or",
                                                     "his",
                                                     "from",
                                                     "at",
                                                     "which",
                                                     "but",
                                                     "have",
                                                     "an",
                                                     "had",
                                                     "they",
                                                     "you",
                                                     "were",
                                                     "their",
                                                     "one",
                                                     "all",
                                                     "we",
                                                     "can",
                                                     "her",
                                                     "has",
                                                     "there",
                                                     "been",
                                                     "if",
                                                     "more",
                                                     "when",
                                                     "will",
                                                     "would",
                                                     "who",
                                                     "so",
                                                     "no",
                                                     "learner",
                                                     "policy",
                                                     "gradient",
                                                     "reward",
                                                     "environment",
                                                     "trajectory",
                                                     "buffer",
                                                     "actor",
                                                     "token",
                                                     "model",
                                                     "training",
                                                     "asynchronous",
                                                     "throughput",
                                                     "latency",
                                                     "tokenizer",
                                                     "Hello",
                                                     "World",
                                                     "The",
                                                     "Internationalization",
                                                     "antidisestablishmentarianism",
                                                     "naïve",
                                                     "café",
                                                     "résumé",
                                                     "Straße",
                                                     "coöperate",
                                                     "jalapeño",
                                                     "façade",
                                                     "piñata",
                                                     "OpenAI",
                                                     "GPU",
                                                     "HTTP",
                                                     "JSON",
                                                     "iPhone",
                                                     "McDonald",
                                                     "O'Neil",
                                                     "rock'n'roll",
                                                     "e-mail",
                                                     "co-operate",
                                                     "state-of-the-art",
                                                     "x86_64",
                                                     "snake_case",
                                                     "camelCase",
                                                     "PascalCase",
                                                     "SCREAMING_CASE",
                                                     "Qwen3",
                                                     "Llama-3"};

constexpr std::array<std::string_view, 24> kContractions = {
    "'s",  "'t", "'re", "'ve", "'m",  "'ll", "'d",  "'S",  "'T", "'RE", "'VE", "'M",
    "'LL", "'D", "'Re", "'rE", "'Ve", "'vE", "'Ll", "'lL", "'ſ", "'K",  "’s",  "’LL"};

constexpr std::array<std::string_view, 12> kPunctuation = {".",   ",",    "!",  "?", ";", ":",
                                                           "...", " -- ", "\"", "(", ")", "—"};

constexpr std::array<std::string_view, 24> kCode = {
    "int main(int argc, char** argv) {\n  return 0;\n}\n",
    "def f(x):\n    return x * 2  # double\n",
    "for (size_t i = 0; i < n; ++i) {\n\tsum += a[i];\n}\n",
    "if x == None:\n\tpass\nelif x >= 10 and y != 3:\n        raise ValueError(\"bad\")\n",
    "{\"key\": [1, 2.5, -3e10, true, null], \"nested\": {\"a\": \"b\"}}",
    "SELECT id, name FROM users WHERE age > 21 ORDER BY name DESC;",
    "#include <vector>\n#include \"flywheel/core/status.h\"\n",
    "auto it = std::find_if(v.begin(), v.end(), [&](const auto& x) { return x->ok(); });",
    "x = [i**2 for i in range(100) if i % 3 == 0]\n",
    "$ cd /tmp && ls -la | grep '\\.json$' > out.txt 2>&1\n",
    "    \n    \n        return;\n    }\n",
    "<div class=\"main\"><a href=\"https://example.com/?q=1&r=2\">link</a></div>",
    "std::unique_ptr<HfTokenizer> tok = *LoadHfTokenizer(path);",
    "a+=b;c-=d;e*=f;g/=h;i%=j;k<<=1;l>>=2;m&&n||!o;p->q;r::s",
    "\t\t\tif (a) {\r\n\t\t\t\tb();\r\n\t\t\t}\r\n",
    "// TODO(alice): fix   this  \n/* block\n * comment\n */\n",
    "fn main() -> Result<(), Box<dyn Error>> { println!(\"{:?}\", v); Ok(()) }",
    "lambda x, y: (x @ y).T.reshape(-1, 3)[..., ::2]",
    "0x7fffffff 0b1010 0o777 1_000_000 3.14159e-10 1e+308",
    "    def __init__(self, *args, **kwargs) -> None:\n        super().__init__()\n",
    "git commit -m \"fix: don't crash\" && git push origin HEAD:refs/for/main",
    "key: value\nlist:\n  - one\n  - two\n    nested: \"yes\"\n",
    "printf(\"%d %s %5.2f\\n\", n, s, x);",
    "!!!???...---___===+++***&&&|||^^^~~~```'''\"\"\""};

constexpr std::array<std::string_view, 16> kCjk = {
    "我们在训练语言模型",     "强化学习的异步训练系统", "今日は良い天気ですね",
    "トークナイザーのテスト", "ひらがなとカタカナ",     "한국어 문장을 토큰화합니다",
    "안녕하세요 세계",        "東京都渋谷区",           "中华人民共和国",
    "繁體中文與简体中文",     "一二三四五六七八九十",   "「引用」『二重』【括弧】",
    "，。！？：；、",         "漢字かなまじり文",       "첫째 둘째 셋째",
    "数学：∑∫∂√∞≈≠≤≥"};

constexpr std::array<std::string_view, 24> kEmoji = {"😀",
                                                     "🎉",
                                                     "👍🏽",
                                                     "👨‍👩‍👧‍👦",
                                                     "🏳️‍🌈",
                                                     "🇯🇵",
                                                     "🇺🇸🇫🇷",
                                                     "1️⃣",
                                                     "❤️",
                                                     "✨",
                                                     "🧑‍💻",
                                                     "👩🏿‍🔬",
                                                     "🤖",
                                                     "🙂‍↔️",
                                                     "⚡",
                                                     "☕",
                                                     "🐍",
                                                     "🦀",
                                                     "🚀🚀🚀",
                                                     "😂😂",
                                                     "🫠",
                                                     "👁️‍🗨️",
                                                     "©️",
                                                     "™"};

constexpr std::array<std::string_view, 20> kScripts = {"مرحبا بالعالم",
                                                       "السلام عليكم ورحمة الله",
                                                       "שלום עולם",
                                                       "नमस्ते दुनिया",
                                                       "हिन्दी में लिखा गया वाक्य",
                                                       "Привет, мир!",
                                                       "Съешь же ещё этих мягких французских булок",
                                                       "Γειά σου Κόσμε",
                                                       "ΑΒΓΔ αβγδ",
                                                       "สวัสดีชาวโลก",
                                                       "ภาษาไทยไม่มีช่องว่าง",
                                                       "Բարեւ աշխարհ",
                                                       "გამარჯობა",
                                                       "বাংলা ভাষা",
                                                       "தமிழ் மொழி",
                                                       "ሰላም ዓለም",
                                                       "Tiếng Việt có dấu",
                                                       "Ελληνικά123",
                                                       "кириллица123latin",
                                                       "عدد ١٢٣ و ٤٥٦"};

constexpr std::array<std::string_view, 18> kSpaces = {
    " ",    "  ",       "   ",          "\t",           "\t\t",     "\n",
    "\n\n", "\r\n",     "\r\n\r\n",     " \n",          "\n ",      "\v",
    "\f",   "\xC2\xA0", "\xE3\x80\x80", "\xE2\x80\x83", "\xC2\x85", "\xE2\x80\xA8"};

constexpr std::array<std::string_view, 36> kSpecialTokens = {
    "<|im_start|>", "<|im_end|>", "<|endoftext|>", "<think>", "</think>", "<tool_call>",
    "</tool_call>", "<|fim_prefix|>", "<|vision_start|>", "<tool_response>", "<|begin_of_text|>",
    "<|end_of_text|>", "<|eot_id|>", "<|start_header_id|>", "<|end_header_id|>", "<|eom_id|>",
    "<|python_tag|>", "<|reserved_special_token_5|>", "<|reserved_special_token_250|>",
    "<|finetune_right_pad_id|>",
    // near misses: never a special token
    "<|im_start", "<|im_start|", "im_start|>", "<|IM_START|>", "<| im_start |>", "<|eot_id",
    "<|eot_id|", "<think", "</think", "<|begin_of_text|>>", "<<|im_end|>", "<|<|im_end|>|>",
    "<|reserved_special_token_251|>", "<||>", "<|", "|>"};

constexpr std::array<std::string_view, 14> kLongPieces = {
    "https://example.com/a/very/long/path/with-many-segments/and_underscores/"
    "index.html?query=1&x=y",
    "aGVsbG8gd29ybGQgdGhpcyBpcyBiYXNlNjQgZW5jb2RlZCB0ZXh0IGZvciB0ZXN0aW5nIHB1cnBvc2Vz==",
    "0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef",
    "Pneumonoultramicroscopicsilicovolcanoconiosis",
    "Rindfleischetikettierungsüberwachungsaufgabenübertragungsgesetz",
    "supercalifragilisticexpialidocious",
    "ЧЕЛОВЕКОНЕНАВИСТНИЧЕСТВО",
    "/usr/lib/x86_64-linux-gnu/libtorch_cpu.so.1.13.1",
    "sha256:e3b0c44298fc1c149afbf4c8996fb924",
    "ACGTACGTTTGACCAGTAGGACCCATTAGGCCATTAGGACCCAGGATTACA",
    "lorem_ipsum_dolor_sit_amet",
    "ThisIsAVeryLongCamelCaseIdentifierThatKeepsGoingAndGoing",
    "ааааааааааааааааааа",
    "日本語の長い文字列が空白なしで続くとトークナイザーはどう分割するのでしょうか"};

constexpr std::array<std::string_view, 14> kDecomposed = {
    "e\xCC\x81",
    "A\xCC\x8A",
    "n\xCC\x83",
    "o\xCC\x88",
    "u\xCC\x88\xCC\x81",
    "a\xCC\xA3\xCC\x82",
    "\xE1\x84\x80\xE1\x85\xA1",
    "\xE1\x84\x92\xE1\x85\xA1\xE1\x86\xAB",  // Hangul jamo
    "\xEF\xA4\x80",
    "\xEF\xA9\xB0",  // compatibility ideographs
    "\xE2\x84\xA6",
    "\xE2\x84\xAB",  // Ohm, Angstrom
    "q\xCC\xA3\xCC\x87",
    "\xCD\x84"};  // reordering; U+0344

struct Block {
  char32_t first;
  char32_t last;
};
constexpr std::array<Block, 22> kRandomBlocks = {{
    {0x00, 0x7F},       {0x80, 0xFF},       {0x100, 0x24F},   {0x250, 0x2FF},   {0x300, 0x36F},
    {0x370, 0x3FF},     {0x400, 0x4FF},     {0x590, 0x6FF},   {0x900, 0x97F},   {0xE00, 0xE7F},
    {0x1100, 0x11FF},   {0x2000, 0x206F},   {0x2070, 0x209F}, {0x20A0, 0x20CF}, {0x2100, 0x214F},
    {0x2190, 0x22FF},   {0x3000, 0x30FF},   {0x4E00, 0x9FFF}, {0xAC00, 0xD7A3}, {0xFF00, 0xFFEF},
    {0x1F300, 0x1F64F}, {0x1D400, 0x1D7FF},
}};

// The first `n` characters of valid UTF-8 `text`.
std::string_view FirstChars(std::string_view text, size_t n) {
  size_t end = 0;
  for (size_t i = 0; i < n && end < text.size(); ++i) {
    char32_t c;
    end += DecodeUtf8(text, end, &c);
  }
  return text.substr(0, end);
}

std::string Word(Rng& rng) {
  std::string w(rng.Pick(kWords));
  const size_t style = rng.Below(10);
  if (style == 0) {
    for (char& c : w) c = static_cast<char>(std::toupper(static_cast<unsigned char>(c)));
  } else if (style == 1 && !w.empty()) {
    w[0] = static_cast<char>(std::toupper(static_cast<unsigned char>(w[0])));
  }
  return w;
}

std::string Number(Rng& rng) {
  std::string n;
  const size_t kind = rng.Below(8);
  const size_t digits = rng.Between(1, kind == 0 ? 40 : 9);
  if (kind == 1) n += "-";
  for (size_t i = 0; i < digits; ++i) n.push_back(static_cast<char>('0' + rng.Below(10)));
  if (kind == 2) n += StrCat(".", rng.Below(100000));
  if (kind == 3) n = StrCat("1,234,567.", n);
  if (kind == 4) n += "%";
  if (kind == 5) {  // Arabic-Indic or fullwidth digits, superscripts
    std::string other;
    for (size_t i = 0; i < digits; ++i) {
      const char32_t base = rng.Pick(std::array<char32_t, 3>{0x660, 0xFF10, 0x2070});
      AppendUtf8(base + static_cast<char32_t>(rng.Below(10)), &other);
    }
    n = other;
  }
  return n;
}

std::string English(Rng& rng) {
  std::string s;
  const size_t words = rng.Between(1, 30);
  for (size_t i = 0; i < words; ++i) {
    if (i > 0) s += rng.Chance(90) ? " " : rng.Pick(kSpaces);
    s += Word(rng);
    if (rng.Chance(12)) s += rng.Pick(kContractions);
    if (rng.Chance(10)) s += rng.Pick(kPunctuation);
    if (rng.Chance(5)) s += StrCat(" ", Number(rng));
  }
  if (rng.Chance(60)) s += rng.Pick(std::array<std::string_view, 4>{".", "!", "?", "\n"});
  return s;
}

std::string Code(Rng& rng) {
  std::string s;
  const size_t parts = rng.Between(1, 3);
  for (size_t i = 0; i < parts; ++i) {
    const size_t indent = rng.Below(3);
    if (indent == 1) s += std::string(rng.Between(1, 16), ' ');
    if (indent == 2) s += std::string(rng.Between(1, 4), '\t');
    s += rng.Pick(kCode);
  }
  return s;
}

std::string Cjk(Rng& rng) {
  std::string s;
  const size_t parts = rng.Between(1, 6);
  for (size_t i = 0; i < parts; ++i) {
    s += rng.Pick(kCjk);
    if (rng.Chance(30)) s += rng.Chance(50) ? " " : Word(rng);
    if (rng.Chance(20)) s += Number(rng);
  }
  return s;
}

std::string Emoji(Rng& rng) {
  std::string s;
  const size_t parts = rng.Between(1, 8);
  for (size_t i = 0; i < parts; ++i) {
    s += rng.Pick(kEmoji);
    if (rng.Chance(40)) s += StrCat(" ", Word(rng));
    if (rng.Chance(20)) s += " ";
  }
  return s;
}

std::string Scripts(Rng& rng) {
  std::string s;
  const size_t parts = rng.Between(1, 5);
  for (size_t i = 0; i < parts; ++i) {
    if (i > 0) s += rng.Chance(80) ? " " : rng.Pick(kSpaces);
    s += rng.Chance(70) ? std::string(rng.Pick(kScripts)) : Word(rng);
    if (rng.Chance(20)) s += Number(rng);
    if (rng.Chance(15)) s += rng.Pick(kPunctuation);
  }
  return s;
}

std::string Whitespace(Rng& rng) {
  std::string s;
  if (rng.Chance(50)) s += rng.Pick(kSpaces);  // leading
  const size_t parts = rng.Between(1, 8);
  for (size_t i = 0; i < parts; ++i) {
    const size_t runs = rng.Between(1, 4);
    for (size_t r = 0; r < runs; ++r) s += rng.Pick(kSpaces);
    const size_t what = rng.Below(5);
    if (what == 0) s += Word(rng);
    if (what == 1) s += rng.Pick(kPunctuation);
    if (what == 2) s += Number(rng);
    if (what == 3) s += rng.Pick(kCjk);
    if (what == 4) s += rng.Pick(kContractions);
  }
  if (rng.Chance(50)) {  // trailing
    const size_t runs = rng.Between(1, 3);
    for (size_t r = 0; r < runs; ++r) s += rng.Pick(kSpaces);
  }
  return s;
}

std::string Numbers(Rng& rng) {
  std::string s;
  const size_t parts = rng.Between(1, 6);
  for (size_t i = 0; i < parts; ++i) {
    if (i > 0) s += rng.Chance(70) ? " " : rng.Pick(kPunctuation);
    s += Number(rng);
    if (rng.Chance(20)) s += Word(rng);
  }
  return s;
}

std::string Special(Rng& rng) {
  std::string s;
  const size_t parts = rng.Between(1, 6);
  for (size_t i = 0; i < parts; ++i) {
    const size_t around = rng.Below(6);
    if (around == 0) s += " ";
    if (around == 1) s += "\n";
    if (around == 2) s += Word(rng);
    s += rng.Pick(kSpecialTokens);
    if (rng.Chance(30)) s += rng.Pick(kSpecialTokens);
    if (rng.Chance(40)) s += rng.Chance(50) ? English(rng) : rng.Pick(kSpaces);
  }
  return s;
}

std::string Long(Rng& rng) {
  const size_t kind = rng.Below(5);
  if (kind == 0) {  // one character many times
    const std::string unit(
        rng.Pick(std::array<std::string_view, 8>{"a", " ", "\n", "-", "=", "0", "中", "\t"}));
    std::string s;
    const size_t n = rng.Between(16, 2000);
    for (size_t i = 0; i < n; ++i) s += unit;
    return s;
  }
  if (kind == 1) {  // a long CJK run without spaces (one pre-token: the merge queue)
    std::string s;
    const size_t n = rng.Between(4, 20);
    for (size_t i = 0; i < n; ++i) s += FirstChars(rng.Pick(kCjk), 3);
    return s;
  }
  std::string s(rng.Pick(kLongPieces));
  if (rng.Chance(50)) s = StrCat(Word(rng), " ", s);
  if (rng.Chance(30)) s += std::string(rng.Between(1, 300), 'x');
  return s;
}

std::string Nfc(Rng& rng) {
  std::string s;
  const size_t parts = rng.Between(1, 6);
  for (size_t i = 0; i < parts; ++i) {
    if (rng.Chance(50)) s += Word(rng);
    s += rng.Pick(kDecomposed);
    if (rng.Chance(40)) s += " ";
  }
  return s;
}

std::string RandomCodePoints(Rng& rng) {
  std::string s;
  const size_t n = rng.Between(1, 40);
  for (size_t i = 0; i < n; ++i) {
    const Block& b = rng.Pick(kRandomBlocks);
    char32_t c = b.first + static_cast<char32_t>(rng.Below(b.last - b.first + 1));
    if (c >= 0xD800 && c <= 0xDFFF) c = 'x';  // no surrogates in UTF-8
    AppendUtf8(c, &s);
  }
  return s;
}

}  // namespace

std::vector<CorpusText> TokenizerCorpus(size_t count, uint64_t seed) {
  using Generator = std::string (*)(Rng&);
  static constexpr std::array<std::pair<const char*, Generator>, 11> kCategories = {{
      {"english", English},
      {"code", Code},
      {"cjk", Cjk},
      {"emoji", Emoji},
      {"scripts", Scripts},
      {"whitespace", Whitespace},
      {"numbers", Numbers},
      {"special", Special},
      {"long", Long},
      {"nfc", Nfc},
      {"random", RandomCodePoints},
  }};
  Rng rng(seed);
  std::vector<CorpusText> corpus;
  corpus.reserve(count);
  for (size_t i = 0; i < count; ++i) {
    const auto& [name, generate] = kCategories[i % kCategories.size()];
    corpus.push_back({name, generate(rng)});
  }
  return corpus;
}

size_t CorpusBytes(const std::vector<CorpusText>& corpus) {
  size_t bytes = 0;
  for (const CorpusText& t : corpus) bytes += t.text.size();
  return bytes;
}

}  // namespace flywheel
