// A library named like a plugin that does not export the descriptor symbol.
extern "C" int ballast_not_a_descriptor() { return 42; }
