"""engine/models/__init__.py: the registry of architectures and the contract each module fills."""

from hearth.engine import config, models


def test_every_registered_architecture_has_a_model_with_the_contracts_methods():
    for name, arch in models.ARCHITECTURES.items():
        cls = getattr(models.module(name), arch.model)
        for method in ("forward", "make_state", "make_resident", "set_int8"):
            assert callable(getattr(cls, method, None)), (name, method)
        assert arch.rope in ("normal", "neox"), name


def test_the_engines_tables_are_the_registrys():
    assert config.SUPPORTED_ARCHS == {n: a.rope for n, a in models.ARCHITECTURES.items()}
    assert config.ARCH_ALIASES is models.ALIASES
    assert all(models.canonical(a) in models.ARCHITECTURES for a in models.ALIASES)
    assert models.canonical("mistral") == "llama" and models.canonical("qwen3") == "qwen3"
