#pragma once
// The PNG plot of `zmoe bench sweep`: one line of labelled points on linear axes starting at zero, drawn with
// cairo (libcairo2-dev) when the build found it.

#include <string>
#include <vector>

namespace zmoe::cli {

struct plot_point {
    double x = 0.0;
    double y = 0.0;
    std::string label;  ///< drawn beside the point
};

struct line_plot {
    std::string title;
    std::string x_label;
    std::string y_label;
    std::vector<plot_point> points;  ///< joined in this order
};

/// Whether this build can write PNG plots (it was built with cairo).
bool plot_supported();

/// Writes plot as a PNG image of 900x600 pixels. Throws zmoe::error(invalid_argument) when the build has no cairo,
/// zmoe::error(internal) when the file cannot be written.
void write_plot_png(const line_plot& plot, const std::string& path);

/// "Nice" tick spacing (1, 2 or 5 times a power of ten) giving about `ticks` intervals over [0, max].
double nice_tick_step(double max, int ticks);

}  // namespace zmoe::cli
