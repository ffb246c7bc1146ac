// The lm-eval task layer (src/eval/tasks.h, requests.h, metrics.h, results.h, gsm8k.h, py_random.h) on
// the small hand-written files under tests/data/eval (not benchmark data). Expected prompts were worked
// by hand from the lm-eval YAML/utils rules; the few-shot draws and bootstrap values were checked against
// CPython 3.11's random module running lm-eval's own sampler/bootstrap code.
#include <gtest/gtest.h>

#include <cmath>
#include <map>

#include "core/error.h"
#include "eval/gsm8k.h"
#include "eval/metrics.h"
#include "eval/py_random.h"
#include "eval/py_str.h"
#include "eval/requests.h"
#include "eval/results.h"
#include "eval/task_results.h"
#include "eval/tasks.h"

namespace zaya::eval {
namespace {

const std::string kData = std::string(ZAYA_SOURCE_DIR) + "/tests/data/eval";

// Runs `fn`, expects a zaya::Error whose message contains every one of `parts`.
template <typename Fn>
void expect_error(Fn&& fn, const std::vector<std::string>& parts) {
  try {
    fn();
    ADD_FAILURE() << "no zaya::Error thrown";
  } catch (const Error& e) {
    for (const std::string& p : parts)
      EXPECT_NE(std::string(e.what()).find(p), std::string::npos)
          << "message: " << e.what() << "\nmissing: " << p;
  }
}

// ---- Python's random -----------------------------------------------------------------------------

TEST(PyRandom, MatchesCPython) {
  PyRandom a(1234);
  EXPECT_EQ(a.random(), 0.9664535356921388);
  EXPECT_EQ(a.sample_indices(10, 3), (std::vector<size_t>{7, 1, 0}));
  EXPECT_EQ(PyRandom(1234).getrandbits(32), 4150886329u);
  PyRandom b(1234);  // n > setsize: the set algorithm
  EXPECT_EQ(b.sample_indices(100, 7), (std::vector<size_t>{99, 56, 14, 0, 11, 74, 4}));
  EXPECT_EQ(b.sample_indices(1000, 3), (std::vector<size_t>{687, 709, 85}));
  PyRandom c((uint64_t(1) << 40) + 5);  // a seed of two 32-bit words
  EXPECT_EQ(c.sample_indices(50, 5), (std::vector<size_t>{32, 33, 17, 42, 1}));
  EXPECT_EQ(c.random(), 0.530959239292452);
  EXPECT_EQ(PyRandom(0).choices_indices(10, 8), (std::vector<size_t>{8, 7, 4, 2, 5, 4, 7, 3}));
  expect_error([] { PyRandom(1).sample_indices(2, 3); }, {"Sample larger than population"});
}

TEST(PyStr, PythonStringRules) {
  EXPECT_EQ(python_strip("\xc2\xa0x\xe3\x80\x80"), "x");                              // U+00A0, U+3000
  EXPECT_EQ(python_rstrip("a\xe2\x80\x89"), "a");                                     // U+2009
  EXPECT_EQ(python_strip("\xe2\x80\x8bx\xe2\x80\x8b"), "\xe2\x80\x8bx\xe2\x80\x8b");  // U+200B is no space
  EXPECT_EQ(python_strip("\xc2\x85 \xc3\xa9 \xe2\x80\xaf"), "\xc3\xa9");
  EXPECT_EQ(python_strip(" \t\n "), "");
  EXPECT_EQ(python_rstrip("x\x1f\r\n"), "x");
  EXPECT_EQ(python_len("caf\xc3\xa9"), 4);
  EXPECT_EQ(python_capitalize("she STIRS it with a Spoon"), "She stirs it with a spoon");
}

// ---- Registry ------------------------------------------------------------------------------------

TEST(EvalTasks, Registry) {
  std::vector<std::string> names;
  for (const Task& t : list_tasks()) names.push_back(t.name);
  EXPECT_EQ(names, (std::vector<std::string>{"hellaswag", "arc_easy", "arc_challenge", "piqa", "winogrande",
                                             "mmlu", "lambada_openai", "gsm8k"}));
  const Task* gsm = find_task("gsm8k");
  ASSERT_NE(gsm, nullptr);
  EXPECT_EQ(gsm->version, 3.0);
  EXPECT_EQ(gsm->output_type, OutputType::GenerateUntil);
  EXPECT_EQ(gsm->default_num_fewshot, 5);
  EXPECT_EQ(gsm->until, (std::vector<std::string>{"Question:", "</s>", "<|im_end|>"}));
  EXPECT_EQ(find_task("mmlu")->default_num_fewshot, 5);
  EXPECT_EQ(find_task("mmlu")->sampling, FewshotSampling::FirstN);
  EXPECT_EQ(find_task("hellaswag")->eval_split, "validation");
  EXPECT_EQ(find_task("arc_challenge")->eval_split, "test");
  EXPECT_EQ(find_task("winogrande")->metrics, (std::vector<std::string>{"acc"}));
  EXPECT_EQ(find_task("nope"), nullptr);
}

// ---- Readers and prompts -------------------------------------------------------------------------

TEST(EvalTasks, HellaswagPreprocess) {
  EXPECT_EQ(hellaswag_preprocess("  Home and Garden: [title] How to water [step] Fill a can. "),
            "Home and Garden:. How to water Fill a can.");
  EXPECT_EQ(hellaswag_preprocess("[header] then  she sings."), " then she sings.");     // leading space stays
  EXPECT_EQ(hellaswag_preprocess("a   b"), "a  b");                                     // one pass, as Python
  EXPECT_EQ(hellaswag_preprocess("keep [open\nline] this"), "keep [open\nline] this");  // '.' stops at \n
  EXPECT_EQ(hellaswag_preprocess("x [a] [b]"), "x ");  // stripped before the removal
  EXPECT_EQ(python_capitalize("she STIRS it with a Spoon"), "She stirs it with a spoon");
  EXPECT_EQ(python_len("caf\xc3\xa9"), 4);
}

TEST(EvalTasks, HellaswagItems) {
  const TaskData data = load_task("hellaswag", kData, /*with_fewshot=*/false);
  ASSERT_EQ(data.eval_docs.size(), 2u);
  const auto items = build_mc_items(data, 0);
  ASSERT_EQ(items.size(), 2u);
  EXPECT_EQ(items[0].contexts,
            (std::vector<std::string>{
                "Baking cookies: A woman pours flour into a bowl. She stirs it with a spoon"}));
  EXPECT_EQ(items[0].continuations,
            (std::vector<std::string>{" and adds two eggs.", "  then she sings.",
                                      " throws the bowl away quickly.", " and eats the flour."}));
  EXPECT_EQ(items[0].choice_chars, (std::vector<int64_t>{18, 16, 29, 19}));
  EXPECT_EQ(items[0].gold, 0);
  EXPECT_EQ(items[1].contexts[0], "Home and Garden:. How to water a plant Fill a can.");
  EXPECT_EQ(items[1].gold, 2);
  EXPECT_TRUE(items[0].id.find("hellaswag/validation.jsonl:1") != std::string::npos);
}

// HellaSwag few-shot from train with one Random(1234) stream across docs (lm-eval's sampler). Train line 5
// repeats validation line 1: the first doc's draw [3, 0, 4] drops it; the second doc may use it.
TEST(EvalTasks, HellaswagFewshotAsLmEval) {
  const TaskData data = load_task("hellaswag", kData, true);
  const auto items = build_mc_items(data, 2, 1234);
  EXPECT_EQ(
      items[0].contexts[0],
      "Reading: A boy opens a book. He reads a page.\n\nRunning: A man ties his shoes. He starts to run.\n\n"
      "Baking cookies: A woman pours flour into a bowl. She stirs it with a spoon");
  EXPECT_EQ(
      items[1].contexts[0],
      "Running: A man ties his shoes. He starts to run.\n\nBaking cookies: A woman pours flour into a bowl. "
      "She stirs it with a spoon and adds two eggs.\n\nHome and Garden:. How to water a plant Fill a can.");
  // Deterministic per seed; another seed draws others ([2, 1, 3] for seed 7).
  EXPECT_EQ(build_mc_items(data, 2, 1234)[0].contexts, items[0].contexts);
  const auto seven = build_mc_items(data, 2, 7);
  EXPECT_EQ(seven[0].contexts[0].substr(0, 8), "Cooking:");
  // build_fewshot_context: a fresh stream; the item is never its own example, whatever the seed.
  const auto ctx = build_fewshot_context(data.task, data.fewshot_docs, data.eval_docs[1], 2, 1234);
  EXPECT_EQ(ctx[0].substr(0, 8), "Reading:");
  for (uint64_t seed = 0; seed < 50; seed++) {
    const auto c = build_fewshot_context(data.task, data.fewshot_docs, data.eval_docs[0], 4, seed)[0];
    EXPECT_EQ(c.find("with a spoon and adds two eggs."), std::string::npos) << "seed " << seed;
  }
  expect_error([&] { build_mc_items(data, 5, 1234); }, {"hellaswag", "5 few-shot", "has 5"});
}

TEST(EvalTasks, ArcItemsAndFewshot) {
  const TaskData data = load_task("arc_easy", kData, true);
  const auto items = build_mc_items(data, 0);
  ASSERT_EQ(items.size(), 2u);
  EXPECT_EQ(items[0].contexts[0], "Question: Which is a liquid at room temperature?\nAnswer:");
  EXPECT_EQ(items[0].continuations, (std::vector<std::string>{" ice", " water", " steam"}));
  EXPECT_EQ(items[0].gold, 1);
  EXPECT_EQ(items[1].gold, 1);  // answerKey "2" among labels "1".."4"
  // 1-shot: the test split is not the few-shot split, so lm-eval draws k (no k + 1): [1] then [0].
  const auto shot = build_mc_items(data, 1, 1234);
  EXPECT_EQ(shot[0].contexts[0],
            "Question: What do bees make?\nAnswer: honey\n\nQuestion: Which is a liquid at room "
            "temperature?\nAnswer:");
  EXPECT_EQ(shot[1].contexts[0].substr(0, 32), "Question: What color is the sky?");
}

TEST(EvalTasks, PiqaItems) {
  const auto items = build_mc_items(load_task("piqa", kData, false), 0);
  ASSERT_EQ(items.size(), 1u);
  EXPECT_EQ(items[0].contexts[0], "Question: Open a jar.\nAnswer:");
  EXPECT_EQ(items[0].continuations, (std::vector<std::string>{" Twist the lid.", " Hit it with a hammer."}));
  EXPECT_EQ(items[0].gold, 0);
}

// Partial scoring: one context per option (the sentence up to the blank, filled), one shared
// continuation (the rest); a few-shot example is the gold-filled context + " " + the rest.
TEST(EvalTasks, WinograndePartialScoring) {
  const TaskData data = load_task("winogrande", kData, true);
  const auto items = build_mc_items(data, 0);
  ASSERT_EQ(items.size(), 1u);
  EXPECT_EQ(items[0].contexts,
            (std::vector<std::string>{"The trophy did not fit in the case because the trophy",
                                      "The trophy did not fit in the case because the case"}));
  EXPECT_EQ(items[0].continuations, (std::vector<std::string>{" was too big."}));
  EXPECT_EQ(items[0].continuation(1), " was too big.");
  EXPECT_EQ(items[0].choice_chars, (std::vector<int64_t>{53, 51}));  // len(doc_to_choice): the contexts
  EXPECT_EQ(items[0].gold, 0);
  const auto shot = build_mc_items(data, 1, 1234);  // draw [1, 0] (k + 1), keep the first
  EXPECT_EQ(shot[0].context(0),
            "The cup broke when the ball hit it since cup was fragile.\n\n"
            "The trophy did not fit in the case because the trophy");
}

TEST(EvalTasks, MmluPromptDescriptionAndFirstN) {
  EXPECT_EQ(mmlu_description("high_school_us_history"),
            "The following are multiple choice questions (with answers) about high school us history.\n\n");
  const TaskData data = load_task("mmlu", kData, true);
  ASSERT_EQ(data.eval_docs.size(), 3u);
  const auto items = build_mc_items(data, 1);
  EXPECT_EQ(items[0].task, "mmlu_elementary_mathematics");
  EXPECT_EQ(items[0].contexts[0],
            "The following are multiple choice questions (with answers) about elementary mathematics.\n\n"
            "What is 1 + 1?\nA. 2\nB. 3\nC. 4\nD. 5\nAnswer: A\n\n"
            "What is 2 + 2?\nA. 3\nB. 4\nC. 5\nD. 6\nAnswer:");
  EXPECT_EQ(items[0].continuations, (std::vector<std::string>{" A", " B", " C", " D"}));
  EXPECT_EQ(items[0].gold, 1);
  EXPECT_EQ(items[1].task, "mmlu_high_school_biology");
  EXPECT_EQ(items[1].contexts[0],
            "The following are multiple choice questions (with answers) about high school biology.\n\n"
            "Cells contain?\nA. rocks\nB. DNA\nC. glass\nD. steel\nAnswer: B\n\n"
            "Which organ pumps blood?\nA. lung\nB. liver\nC. heart\nD. skin\nAnswer:");
  // first_n: every doc of a subject gets the same first dev examples, in file order.
  EXPECT_EQ(items[2].contexts[0].substr(0, items[2].contexts[0].rfind("\n\n")),
            items[0].contexts[0].substr(0, items[0].contexts[0].rfind("\n\n")));
}

TEST(EvalTasks, MmluNeedsEnoughDevExamples) {
  const TaskData data = load_task("mmlu", kData, true);
  expect_error([&] { build_mc_items(data, 2); }, {"mmlu", "2 few-shot", "high_school_biology"});
}

TEST(EvalTasks, MmluOneFilePerSubject) {
  const TaskData data = load_task("mmlu", kData + "/split_layout", true);
  const auto items = build_mc_items(data, 1);
  ASSERT_EQ(items.size(), 1u);
  EXPECT_EQ(items[0].task, "mmlu_anatomy");
  EXPECT_EQ(items[0].gold, 1);  // answer "B"
  EXPECT_EQ(items[0].contexts[0],
            "The following are multiple choice questions (with answers) about anatomy.\n\n"
            "How many hands do humans have?\nA. 1\nB. 2\nC. 3\nD. 4\nAnswer: B\n\n"
            "Where is the femur?\nA. arm\nB. leg\nC. head\nD. chest\nAnswer:");
}

TEST(EvalTasks, LambadaLastWord) {
  const TaskData data = load_task("lambada_openai", kData, false);
  const auto items = build_ll_items(data, 0);
  ASSERT_EQ(items.size(), 2u);
  EXPECT_EQ(items[0].context, "the cat sat on the mat and looked at the");
  EXPECT_EQ(items[0].continuation, " dog");
  EXPECT_EQ(items[1].context, "");
  EXPECT_EQ(items[1].continuation, " hello");
  expect_error([&] { build_mc_items(data, 0); }, {"loglikelihood task, not multiple_choice"});
}

TEST(EvalTasks, Gsm8kItems) {
  const TaskData data = load_task("gsm8k", kData, true);
  const auto items = build_gen_items(data, 2, 1234);
  ASSERT_EQ(items.size(), 4u);
  EXPECT_EQ(
      items[0].context,
      "Question: What is 2 * 5?\nAnswer: 2 * 5 = 10\n#### 10\n\nQuestion: What is 1 + 2?\nAnswer: 1 + 2 = "
      "3\n#### 3\n\nQuestion: Tom has 3 apples and buys 4 more. How many apples does he have?\nAnswer:");
  EXPECT_EQ(items[0].reference, "He has 3 + 4 = <<3+4=7>>7 apples.\n#### 7");
  EXPECT_EQ(items[0].until, (std::vector<std::string>{"Question:", "</s>", "<|im_end|>"}));
  expect_error([&] { build_gen_items(load_task("gsm8k", kData, false), 5); }, {"few-shot split", "train"});
}

TEST(EvalTasks, GenericSchema) {
  const TaskData data = load_task("my_task", kData, true);
  EXPECT_EQ(data.task.fewshot_split, "test");  // no train.jsonl: few-shot from test, the item excluded
  const auto items = build_mc_items(data, 0);
  ASSERT_EQ(items.size(), 3u);
  EXPECT_EQ(items[1].contexts[0], "Two plus two is");
  EXPECT_EQ(items[1].continuations, (std::vector<std::string>{" three", " four"}));
  EXPECT_EQ(items[1].gold, 1);
  const auto shot = build_mc_items(data, 2, 1234);
  for (size_t i = 0; i < shot.size(); i++) {
    const std::string& own = data.eval_docs[i].text;
    const std::string& c = shot[i].contexts[0];
    EXPECT_EQ(c.find(own), c.size() - own.size()) << "the item appears only as the question: " << c;
  }
}

TEST(EvalTasks, MalformedFilesNameFileLineAndField) {
  const std::string bad = kData + "/bad";
  expect_error([&] { load_task("hellaswag", bad, false); }, {"hellaswag/validation.jsonl:2"});
  expect_error([&] { load_task("piqa", bad, false); }, {"piqa/validation.jsonl:1", "missing field 'sol2'"});
  expect_error([&] { load_task("arc_easy", bad, false); }, {"arc_easy/test.jsonl:2", "answerKey", "\"E\""});
  expect_error([&] { load_task("winogrande", bad, false); }, {"winogrande/validation.jsonl:1", "blank"});
  expect_error([&] { load_task("mmlu", bad, false); }, {"mmlu/test.jsonl:1", "'answer' is 7"});
  expect_error([&] { load_task("piqa", kData + "/nowhere", false); }, {"nowhere/piqa", "not found"});
  expect_error([&] { load_task("arc_easy", kData + "/split_layout", false); }, {"arc_easy", "not found"});
}

// ---- Requests ------------------------------------------------------------------------------------

// A word-piece encoder: a token is a run of non-spaces with the spaces before it (" dog"), or trailing
// spaces alone; ids from a growing table (100, 101, ...).
struct FakeTokenizer {
  std::map<std::string, int32_t> ids;
  std::vector<int32_t> encode(const std::string& text) {
    std::vector<int32_t> out;
    size_t i = 0;
    while (i < text.size()) {
      size_t j = i;
      while (j < text.size() && text[j] == ' ') j++;
      while (j < text.size() && text[j] != ' ') j++;
      const std::string piece = text.substr(i, j - i);
      auto it = ids.find(piece);
      if (it == ids.end()) it = ids.emplace(piece, int32_t(100 + ids.size())).first;
      out.push_back(it->second);
      i = j;
    }
    return out;
  }
  int32_t id(const std::string& piece) { return ids.at(piece); }
};

TEST(EvalRequests, TrailingWhitespaceMovesToContinuation) {
  FakeTokenizer tok;
  const EncodeFn enc = [&](const std::string& s) { return tok.encode(s); };
  const EncodedRequest r = encode_request("Question: x\nAnswer: ", "A", enc, 2);
  EXPECT_EQ(r.context, (std::vector<int32_t>{2, tok.id("Question:"), tok.id(" x\nAnswer:")}));
  EXPECT_EQ(r.continuation, (std::vector<int32_t>{tok.id(" A")}));
  // Without the move the context would end in a lone " " token and the continuation be empty.
  const EncodedRequest plain = encode_request("the cat", " sat down", enc, 2);
  EXPECT_EQ(plain.context, (std::vector<int32_t>{2, tok.id("the"), tok.id(" cat")}));
  EXPECT_EQ(plain.continuation, (std::vector<int32_t>{tok.id(" sat"), tok.id(" down")}));
}

TEST(EvalRequests, WholeMinusContextSplit) {
  // An encoder that merges across the boundary: "ab" is one token, so the continuation is what the whole
  // encoding has beyond the context's length (lm-eval takes whole[len(context_enc):]).
  const EncodeFn enc = [](const std::string& s) {
    std::vector<int32_t> out;
    for (size_t i = 0; i < s.size(); i++) {
      if (s.compare(i, 2, "ab") == 0) {
        out.push_back(50);
        i++;
      } else {
        out.push_back(int32_t((unsigned char)s[i]));
      }
    }
    return out;
  };
  const EncodedRequest r = encode_request("xa", "bc", enc, 2);
  EXPECT_EQ(r.context, (std::vector<int32_t>{2, 'x', 'a'}));  // encode("xa")
  EXPECT_EQ(r.continuation, (std::vector<int32_t>{'c'}));     // [2, x, 50, c][3:]
}

TEST(EvalRequests, EmptyContextUsesBos) {
  FakeTokenizer tok;
  const EncodeFn enc = [&](const std::string& s) { return tok.encode(s); };
  const EncodedRequest r = encode_request("", " hello", enc, 2);
  EXPECT_EQ(r.context, (std::vector<int32_t>{2}));
  EXPECT_EQ(r.continuation, (std::vector<int32_t>{tok.id(" hello")}));
  const EncodeFn starts_with_bos = [](const std::string&) { return std::vector<int32_t>{2, 7, 8}; };
  const EncodedRequest b = encode_request("", "x", starts_with_bos, 2);
  EXPECT_EQ(b.context, (std::vector<int32_t>{2}));
  EXPECT_EQ(b.continuation, (std::vector<int32_t>{7, 8}));
  expect_error([&] { encode_request("", "x", enc, -1); }, {"empty context"});
}

TEST(EvalRequests, LeftTruncation) {
  EncodedRequest r;
  r.context = {1, 2, 3, 4, 5};
  r.continuation = {6, 7};
  const ScoringInput s = scoring_input(r, 4);  // (ctx + cont)[-5:][:-1]
  EXPECT_EQ(s.input, (std::vector<int32_t>{3, 4, 5, 6}));
  EXPECT_EQ(s.continuation, (std::vector<int32_t>{6, 7}));
  const ScoringInput whole = scoring_input(r, 100);  // no truncation: all but the last token
  EXPECT_EQ(whole.input, (std::vector<int32_t>{1, 2, 3, 4, 5, 6}));
  expect_error([&] { scoring_input(r, 1); }, {"continuation has 2 tokens"});
}

// ---- Metrics -------------------------------------------------------------------------------------

McItem two_choice_item(const std::string& a, const std::string& b, int gold) {
  McItem it;
  it.id = "t";
  it.contexts = {"q"};
  it.continuations = {" " + a, " " + b};
  it.choice_chars = {python_len(a), python_len(b)};
  it.choice_bytes = {int64_t(a.size()), int64_t(b.size())};
  it.gold = gold;
  return it;
}

TEST(EvalMetrics, AccAndAccNorm) {
  const McItem item = two_choice_item("A", "BBBB", 1);
  const McScores s = score_multiple_choice(item, {-2.0, -4.0});  // per char: -2 vs -1
  EXPECT_EQ(s.pred, 0);
  EXPECT_EQ(s.pred_norm, 1);
  EXPECT_EQ(s.acc, 0.0);
  EXPECT_EQ(s.acc_norm, 1.0);
  // Ties go to the first maximum (numpy.argmax).
  EXPECT_EQ(score_multiple_choice(two_choice_item("x", "y", 1), {-1.0, -1.0}).pred, 0);
  EXPECT_EQ(argmax_first({1.0, 3.0, 3.0, 2.0}), 1);
  EXPECT_EQ(argmax_first({1.0, NAN, 5.0, NAN}), 1);
  EXPECT_EQ(argmax_first({}), -1);
  // Characters are code points: "é" (2 bytes) is one character.
  const McItem uni = two_choice_item("\xc3\xa9\xc3\xa9", "abc", 0);
  const McScores u = score_multiple_choice(uni, {-2.2, -3.0});  // per char -1.1 vs -1.0; per byte -0.55 vs -1
  EXPECT_EQ(u.pred_norm, 1);
  EXPECT_EQ(u.pred_bytes, 0);
  expect_error([&] { score_multiple_choice(item, {-1.0}); }, {"1 loglikelihoods for 2 choices"});
}

TEST(EvalMetrics, MeanStderrByHand) {
  // [1, 0, 1, 1]: mean 0.75, sample variance ((3 * 0.25^2) + 0.75^2) / 3 = 0.25, stderr 0.5 / 2.
  EXPECT_DOUBLE_EQ(mean({1, 0, 1, 1}), 0.75);
  EXPECT_DOUBLE_EQ(sample_stddev({1, 0, 1, 1}), 0.5);
  EXPECT_DOUBLE_EQ(mean_stderr({1, 0, 1, 1}), 0.25);
  EXPECT_TRUE(std::isnan(mean_stderr({1})));
  // Pooled (MMLU group): sqrt((3 * 0.25^2 * 4 + 1 * 0.5^2 * 2) / (6 - 2) / 6).
  EXPECT_NEAR(pooled_sample_stderr({0.25, 0.5}, {4, 2}), 0.22821773229381923, 1e-15);
  EXPECT_DOUBLE_EQ(size_weighted_mean({0.5, 1.0}, {4, 2}), 4.0 / 6.0);
}

TEST(EvalMetrics, PerplexityAndBootstrapAsLmEval) {
  const std::vector<double> ll = {-1.0, -2.5, -0.3, -4.0, -1.7};
  EXPECT_NEAR(perplexity(ll), 6.6858944422792685, 1e-12);  // exp(1.9)
  // lm-eval's bootstrap_stderr(perplexity, ll, iters) under CPython 3.11.
  EXPECT_NEAR(perplexity_bootstrap_stderr(ll, 2000), 5.16711200845309, 1e-9);
  EXPECT_NEAR(perplexity_bootstrap_stderr(ll, 100000), 5.099230210023731, 1e-9);
  EXPECT_TRUE(std::isnan(perplexity_bootstrap_stderr(ll, 0)));
}

TEST(EvalGsm8k, ExtractionAndExactMatch) {
  EXPECT_EQ(gsm8k_strict_match("so... #### -1,234.5 done"), "-1,234.5");
  EXPECT_EQ(gsm8k_strict_match("The answer is 7."), "[invalid]");
  EXPECT_EQ(gsm8k_flexible_extract("I have 3 apples and $1,000."), "$1,000.");  // the last match
  EXPECT_EQ(gsm8k_flexible_extract("x 7"), "7");                                // second group
  EXPECT_EQ(gsm8k_flexible_extract("no numbers"), "[invalid]");
  EXPECT_EQ(gsm8k_normalize("$1,000."), "1000");
  EXPECT_EQ(gsm8k_normalize("He has 3 + 4 = <<3+4=7>>7 apples.\n#### 7"), "7");
  EXPECT_EQ(gsm8k_normalize("5.\n"), "5\n");
  EXPECT_EQ(gsm8k_normalize("ABC."), "abc");
  EXPECT_EQ(gsm8k_exact_match("$1,000.", "blah #### 1000"), 1.0);
  EXPECT_EQ(gsm8k_exact_match("[invalid]", "#### 7"), 0.0);
  EXPECT_EQ(truncate_at_stop_sequences(" 3 + 4 = 7\n#### 7\n\nQuestion: next</s>", {"</s>", "Question:"}),
            " 3 + 4 = 7\n#### 7\n\n");
  EXPECT_EQ(truncate_at_stop_sequences("abc", {""}), "abc");
}

// ---- Results -------------------------------------------------------------------------------------

std::vector<TaskResult> sample_results(double hellaswag_acc_last) {
  TaskResult hs{"hellaswag", "", {}, 1.0, 0, 10, {}};
  hs.metrics.push_back({"acc", "none", Aggregation::Mean, true, {1, 0, 1, hellaswag_acc_last}});
  hs.metrics.push_back({"acc_norm", "none", Aggregation::Mean, true, {1, 1, 1, 1}});
  TaskResult m1{"mmlu_anatomy", "anatomy", {"mmlu_stem", "mmlu"}, 1.0, 5, 4, {}};
  m1.metrics.push_back({"acc", "none", Aggregation::Mean, true, {1, 0, 1, 1}});
  TaskResult m2{"mmlu_virology", "virology", {"mmlu_other", "mmlu"}, 1.0, 5, 2, {}};
  m2.metrics.push_back({"acc", "none", Aggregation::Mean, true, {1, 0}});
  TaskResult lam{"lambada_openai", "", {}, 1.0, 0, 5, {}};
  lam.metrics.push_back(
      {"perplexity", "none", Aggregation::Perplexity, false, {-1.0, -2.5, -0.3, -4.0, -1.7}});
  lam.metrics.push_back({"acc", "none", Aggregation::Mean, true, {1, 0, 0, 1, 1}});
  TaskResult gsm{"gsm8k", "", {}, 3.0, 5, 1, {}};
  gsm.metrics.push_back({"exact_match", "strict-match", Aggregation::Mean, true, {1}});
  gsm.metrics.push_back({"exact_match", "flexible-extract", Aggregation::Mean, true, {0}});
  return {hs, m1, m2, lam, gsm};
}

TEST(EvalResults, LmEvalLayout) {
  ModelInfo model{"models/zaya1-8b", config_hash("{\"hidden_size\": 8}"), {{"weights", "bf16"}}};
  const nlohmann::json j = results_json(sample_results(1), model, 2000);
  const auto& hs = j["results"]["hellaswag"];
  EXPECT_EQ(hs["alias"], "hellaswag");
  EXPECT_DOUBLE_EQ(hs["acc,none"].get<double>(), 0.75);
  EXPECT_DOUBLE_EQ(hs["acc_stderr,none"].get<double>(), 0.25);
  EXPECT_DOUBLE_EQ(hs["acc_norm_stderr,none"].get<double>(), 0.0);
  EXPECT_NEAR(j["results"]["lambada_openai"]["perplexity,none"].get<double>(), 6.6858944422792685, 1e-12);
  EXPECT_NEAR(j["results"]["lambada_openai"]["perplexity_stderr,none"].get<double>(), 5.16711200845309, 1e-9);
  EXPECT_EQ(j["results"]["gsm8k"]["exact_match_stderr,strict-match"], "N/A");  // one sample
  EXPECT_EQ(j["results"]["gsm8k"]["exact_match,flexible-extract"], 0.0);
  // MMLU group: size-weighted acc (3 + 1) / 6 and the pooled stderr of 0.25 (n 4) and 0.5 (n 2).
  const auto& g = j["groups"]["mmlu"];
  EXPECT_DOUBLE_EQ(g["acc,none"].get<double>(), 4.0 / 6.0);
  EXPECT_NEAR(g["acc_stderr,none"].get<double>(), 0.22821773229381923, 1e-15);
  EXPECT_EQ(j["results"]["mmlu"], g);
  EXPECT_EQ(j["group_subtasks"]["mmlu"], (nlohmann::json{"mmlu_stem", "mmlu_other"}));
  EXPECT_EQ(j["group_subtasks"]["mmlu_stem"], (nlohmann::json{"mmlu_anatomy"}));
  EXPECT_EQ(j["groups"]["mmlu_stem"]["alias"], "stem");
  EXPECT_DOUBLE_EQ(j["groups"]["mmlu_other"]["acc,none"].get<double>(), 0.5);
  EXPECT_EQ(g["sample_len"], 6);
  EXPECT_EQ(hs["sample_len"], 4);
  EXPECT_EQ(j["results"]["mmlu_anatomy"]["alias"], "anatomy");
  EXPECT_EQ(j["versions"]["gsm8k"], 3.0);
  EXPECT_EQ(j["versions"]["mmlu"], 2.0);
  EXPECT_EQ(j["n-shot"]["mmlu"], 5);
  EXPECT_EQ(j["n-samples"]["hellaswag"], (nlohmann::json{{"original", 10}, {"effective", 4}}));
  EXPECT_EQ(j["higher_is_better"]["lambada_openai"]["perplexity"], false);
  EXPECT_EQ(j["config"]["model"], "models/zaya1-8b");
  EXPECT_EQ(j["config"]["model_config_hash"].get<std::string>().size(), 16u);
  EXPECT_EQ(j["config"]["weights"], "bf16");
  const nlohmann::json none = results_json(sample_results(1), model, 0);
  EXPECT_EQ(none["results"]["hellaswag"]["acc_stderr,none"], "N/A");
}

TEST(EvalResults, MarkdownTable) {
  nlohmann::json a = results_json(sample_results(1), {"model-a", "h1", {}}, 0);
  nlohmann::json b = results_json(sample_results(0), {"model-b", "h2", {}}, 1000);
  b["results"].erase("gsm8k");
  const std::string t = markdown_table({a, b});
  EXPECT_EQ(t.substr(0, t.find('\n')), "| task | metric | model-a | model-b |");
  EXPECT_NE(t.find("| hellaswag | acc | 0.7500 | 0.5000 ± 0.2887 |\n"), std::string::npos) << t;
  EXPECT_NE(t.find("| gsm8k | exact_match (strict-match) | 1.0000 | — |\n"), std::string::npos) << t;
  EXPECT_NE(t.find("| mmlu | acc | 0.6667 |"), std::string::npos) << t;
}

// Scores -> TaskResults: MMLU per subject under the "mmlu" group; GSM8K under both filters; LAMBADA
// perplexity from the loglikelihoods and acc from is_greedy.
TEST(EvalResults, FromScores) {
  const TaskData mmlu = load_task("mmlu", kData, true);
  const auto items = build_mc_items(mmlu, 1);
  // Doc 0 (gold B) right, doc 1 (gold C) wrong, doc 2 (gold A) right by a tie (first max).
  const auto res =
      multiple_choice_results(mmlu, items, {{-3, -1, -2, -4}, {-1, -2, -3, -4}, {-1, -1, -1, -1}}, 1);
  ASSERT_EQ(res.size(), 2u);
  EXPECT_EQ(res[0].name, "mmlu_elementary_mathematics");
  EXPECT_EQ(res[0].alias, "elementary_mathematics");
  EXPECT_EQ(res[0].groups, (std::vector<std::string>{"mmlu_stem", "mmlu"}));
  EXPECT_EQ(mmlu_category("world_religions"), "mmlu_humanities");
  EXPECT_EQ(mmlu_category("my_own_subject"), "");
  EXPECT_EQ(res[0].docs_in_split, 2);
  EXPECT_EQ(res[0].metrics[0].values, (std::vector<double>{1, 1}));
  EXPECT_EQ(res[1].metrics[0].values, (std::vector<double>{0}));
  const nlohmann::json j = results_json(res, {"m", "h", {}}, 100000);
  EXPECT_DOUBLE_EQ(j["groups"]["mmlu"]["acc,none"].get<double>(), 2.0 / 3.0);
  EXPECT_EQ(j["groups"]["mmlu"]["acc_stderr,none"], "N/A");  // biology has one doc: its stderr is N/A

  const TaskData gsm = load_task("gsm8k", kData, false);
  const auto gen = build_gen_items(gsm, 0);
  const TaskResult g = generation_results(
      gsm, gen,
      {" 3 + 4 = 7 apples.\n#### 7\n\nQuestion: What is 8?", " 3 * 12 = 36 pens. The answer is 36.",
       " She has $1,000 left.\n#### 1,000", " It goes 150 miles.\n#### 150.0"},
      0);
  EXPECT_EQ(g.metrics[0].filter, "strict-match");
  // strict: "#### N" only; "1,000" equals "#### 1,000" once the commas go; "150.0" is not "150".
  EXPECT_EQ(g.metrics[0].values, (std::vector<double>{1, 0, 1, 0}));
  // flexible: the last number ("36." loses its final "."), cut at "Question:" first (else "8" would win).
  EXPECT_EQ(g.metrics[1].values, (std::vector<double>{1, 1, 1, 0}));
  const TaskResult miss = generation_results(gsm, gen, {"It is 7 apples, or 8", "", "#### 999", "150"}, 0);
  EXPECT_EQ(miss.metrics[0].values, (std::vector<double>{0, 0, 0, 0}));  // no "#### ", or a wrong number
  EXPECT_EQ(miss.metrics[1].values, (std::vector<double>{0, 0, 0, 1}));  // 8; [invalid]; 999; 150

  const TaskData lam = load_task("lambada_openai", kData, false);
  const TaskResult l = loglikelihood_results(lam, build_ll_items(lam, 0), {{-1.0, true}, {-3.0, false}}, 0);
  EXPECT_EQ(l.metrics[0].metric, "perplexity");
  EXPECT_EQ(l.metrics[0].aggregation, Aggregation::Perplexity);
  EXPECT_NEAR(perplexity(l.metrics[0].values), std::exp(2.0), 1e-12);
  EXPECT_EQ(l.metrics[1].values, (std::vector<double>{1, 0}));
}

}  // namespace
}  // namespace zaya::eval
