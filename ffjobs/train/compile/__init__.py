"""Compiling the training step: which parts are compiled and how (:mod:`~.regions`), the run's
compile cache that lets a restart skip the compiler (:mod:`~.cache`), and the signatures that
let that cache (generated code) be loaded only from where this run wrote it (:mod:`~.signing`)."""
