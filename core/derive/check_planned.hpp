// A plan entry against the model it is used with. A PlannedDerivation is a
// plain struct an engine holds, copies and may edit; what reads it trusts
// its ValueIds and launch shape, so it is checked once where it comes in
// from outside (derive_weight, derive_weights, Residency::create's
// derivations, Residency::pin and prefetch).
#pragma once

#include <ballast/derive.hpp>
#include <ballast/model.hpp>
#include <ballast/status.hpp>

namespace ballast::derive {

// The entry's source is a weight of `model`, under the name the entry
// gives, of the element type the launch reads and holding exactly the
// bytes it reads; its scales and zero points are weights holding theirs,
// present exactly where the kind reads them. invalid_argument naming what
// disagrees (an entry planned for another model, or edited), never a read
// past a weight.
Status check_planned(const Model& model, const PlannedDerivation& p);

}  // namespace ballast::derive
