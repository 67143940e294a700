int ballast_plugin_descriptor(void) { return 0; } /* what a plugin of the C++ ABI exported */
