#include "cli.h"

#include <cstdio>
#include <vector>

#include "core/suggest.h"

namespace zaya::app {

namespace {

// Every option that takes a value shows its default in --help (flags show nothing: they default to off).
void show_defaults(CLI::App& app) {
  for (CLI::Option* o : app.get_options())
    if (o->get_items_expected_max() > 0 && o->get_default_str().empty()) o->capture_default_str();
  for (CLI::App* sub : app.get_subcommands([](CLI::App*) { return true; })) show_defaults(*sub);
}

// "zaya bench forward": the names from the top app down.
std::string full_name(const CLI::App* a) {
  return a->get_parent() ? full_name(a->get_parent()) + " " + a->get_name() : a->get_name();
}

// The innermost subcommand that was parsed (the app itself when none).
CLI::App* innermost(CLI::App* app) {
  for (CLI::App* sub : app->get_subcommands())
    if (sub->parsed()) return innermost(sub);
  return app;
}

std::vector<std::string> option_names(const CLI::App& app) {
  std::vector<std::string> names;
  for (const CLI::Option* o : app.get_options()) {
    for (const std::string& l : o->get_lnames()) names.push_back("--" + l);
    for (const std::string& s : o->get_snames()) names.push_back("-" + s);
  }
  return names;
}

std::vector<std::string> subcommand_names(CLI::App& app) {
  std::vector<std::string> names;
  for (CLI::App* sub : app.get_subcommands([](CLI::App*) { return true; })) names.push_back(sub->get_name());
  return names;
}

// Hints for the words the parser could not place: the nearest option for "--stepz" (or "--stepz=3"), the
// nearest subcommand for a bare word where one is expected.
std::string hints(CLI::App& app) {
  CLI::App* at = innermost(&app);
  const std::vector<std::string> subs = subcommand_names(*at);
  const bool wants_sub = !subs.empty() && at->get_subcommands().empty();
  std::string out;
  for (const std::string& word : at->remaining()) {
    if (word.size() > 1 && word[0] == '-') {
      const std::string flag = word.substr(0, word.find('='));
      const std::string n = nearest_name(flag, option_names(*at));
      if (!n.empty()) out += "\n  " + flag + ": did you mean " + n + "?";
    } else if (wants_sub) {
      const std::string n = nearest_name(word, subs);
      out += "\n  '" + word + "' is not a subcommand of " + full_name(at) +
             (n.empty() ? "" : ": did you mean '" + n + "'?");
    }
  }
  if (wants_sub && out.empty()) {
    std::string list;
    for (const std::string& s : subs) list += (list.empty() ? "" : ", ") + s;
    out += "\n  subcommands: " + list;
  }
  return out;
}

}  // namespace

int parse_args(CLI::App& app, int argc, char** argv) {
  app.name(std::string("zaya ") + argv[0]);
  show_defaults(app);
  try {
    app.parse(argc, argv);
    return -1;
  } catch (const CLI::CallForHelp& e) {
    return app.exit(e);
  } catch (const CLI::CallForAllHelp& e) {
    return app.exit(e);
  } catch (const CLI::ParseError& e) {
    CLI::App* at = innermost(&app);
    std::string msg = full_name(at) + ": error: " + e.what() + hints(app);
    if (at == &app && app.get_name() == "zaya launch" && !app.remaining().empty())
      msg +=
          "\n  the job's command goes after `--`: zaya launch [OPTIONS] -- build/zaya train --config "
          "TRAIN.json --resume auto";
    std::fprintf(stderr, "%s\nRun '%s --help' for the options.\n", msg.c_str(), full_name(at).c_str());
    return 2;
  }
}

}  // namespace zaya::app
