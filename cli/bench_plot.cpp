#include "cli/bench_plot.hpp"

#include <algorithm>
#include <cmath>
#include <cstdio>

#include "base/error.hpp"

#ifdef ZMOE_HAVE_CAIRO
#include <cairo.h>
#endif

namespace zmoe::cli {

double nice_tick_step(double max, int ticks) {
    if (!(max > 0) || ticks < 1) return 1.0;
    const double raw = max / ticks;
    const double decade = std::pow(10.0, std::floor(std::log10(raw)));
    for (double m : {1.0, 2.0, 5.0})
        if (m * decade >= raw) return m * decade;
    return 10.0 * decade;
}

#ifdef ZMOE_HAVE_CAIRO

bool plot_supported() { return true; }

namespace {

std::string tick_text(double v) {
    char buf[32];
    std::snprintf(buf, sizeof(buf), "%g", v);
    return buf;
}

/// Draws text with its anchor at (x, y): ax, ay in 0..1 pick the anchor inside the text's box.
void text_at(cairo_t* cr, const std::string& s, double x, double y, double ax, double ay) {
    cairo_text_extents_t e;
    cairo_text_extents(cr, s.c_str(), &e);
    cairo_move_to(cr, x - e.width * ax - e.x_bearing, y - e.height * ay - e.y_bearing);
    cairo_show_text(cr, s.c_str());
}

}  // namespace

void write_plot_png(const line_plot& plot, const std::string& path) {
    constexpr int kWidth = 900, kHeight = 600;
    constexpr double kLeft = 90, kRight = 40, kTop = 60, kBottom = 70;
    cairo_surface_t* surface = cairo_image_surface_create(CAIRO_FORMAT_ARGB32, kWidth, kHeight);
    cairo_t* cr = cairo_create(surface);
    cairo_set_source_rgb(cr, 1, 1, 1);
    cairo_paint(cr);
    cairo_select_font_face(cr, "sans-serif", CAIRO_FONT_SLANT_NORMAL, CAIRO_FONT_WEIGHT_NORMAL);

    double max_x = 0, max_y = 0;
    for (const auto& p : plot.points) {
        max_x = std::max(max_x, p.x);
        max_y = std::max(max_y, p.y);
    }
    const double step_x = nice_tick_step(max_x * 1.08, 6), step_y = nice_tick_step(max_y * 1.08, 6);
    const double top_x = step_x * std::ceil(max_x * 1.08 / step_x), top_y = step_y * std::ceil(max_y * 1.08 / step_y);
    const double w = kWidth - kLeft - kRight, h = kHeight - kTop - kBottom;
    auto px = [&](double x) { return kLeft + w * (top_x > 0 ? x / top_x : 0); };
    auto py = [&](double y) { return kTop + h * (1.0 - (top_y > 0 ? y / top_y : 0)); };

    // Grid, ticks and their values.
    cairo_set_font_size(cr, 13);
    cairo_set_line_width(cr, 1);
    for (double x = 0; x <= top_x + step_x / 2; x += step_x) {
        cairo_set_source_rgb(cr, 0.88, 0.88, 0.88);
        cairo_move_to(cr, px(x), kTop);
        cairo_line_to(cr, px(x), kTop + h);
        cairo_stroke(cr);
        cairo_set_source_rgb(cr, 0.2, 0.2, 0.2);
        text_at(cr, tick_text(x), px(x), kTop + h + 8, 0.5, 0.0);
    }
    for (double y = 0; y <= top_y + step_y / 2; y += step_y) {
        cairo_set_source_rgb(cr, 0.88, 0.88, 0.88);
        cairo_move_to(cr, kLeft, py(y));
        cairo_line_to(cr, kLeft + w, py(y));
        cairo_stroke(cr);
        cairo_set_source_rgb(cr, 0.2, 0.2, 0.2);
        text_at(cr, tick_text(y), kLeft - 8, py(y), 1.0, 0.5);
    }
    cairo_set_source_rgb(cr, 0, 0, 0);
    cairo_rectangle(cr, kLeft, kTop, w, h);
    cairo_stroke(cr);

    // Axis labels and title.
    cairo_set_font_size(cr, 15);
    text_at(cr, plot.x_label, kLeft + w / 2, kHeight - 22, 0.5, 0.5);
    cairo_save(cr);
    cairo_translate(cr, 24, kTop + h / 2);
    cairo_rotate(cr, -M_PI / 2);
    text_at(cr, plot.y_label, 0, 0, 0.5, 0.5);
    cairo_restore(cr);
    cairo_set_font_size(cr, 18);
    text_at(cr, plot.title, kWidth / 2.0, kTop / 2, 0.5, 0.5);

    // The line, its points and their labels.
    cairo_set_source_rgb(cr, 0.12, 0.47, 0.71);
    cairo_set_line_width(cr, 2.5);
    for (size_t i = 0; i < plot.points.size(); ++i) {
        const auto& p = plot.points[i];
        if (i == 0)
            cairo_move_to(cr, px(p.x), py(p.y));
        else
            cairo_line_to(cr, px(p.x), py(p.y));
    }
    cairo_stroke(cr);
    cairo_set_font_size(cr, 13);
    for (const auto& p : plot.points) {
        cairo_set_source_rgb(cr, 0.12, 0.47, 0.71);
        cairo_arc(cr, px(p.x), py(p.y), 5, 0, 2 * M_PI);
        cairo_fill(cr);
        cairo_set_source_rgb(cr, 0.1, 0.1, 0.1);
        text_at(cr, p.label, px(p.x) + 9, py(p.y) - 9, 0.0, 1.0);
    }

    cairo_destroy(cr);
    const cairo_status_t st = cairo_surface_write_to_png(surface, path.c_str());
    cairo_surface_destroy(surface);
    if (st != CAIRO_STATUS_SUCCESS)
        throw error(errc::internal, "cannot write the plot to '" + path + "': " + cairo_status_to_string(st));
}

#else

bool plot_supported() { return false; }

void write_plot_png(const line_plot&, const std::string&) {
    throw error(errc::invalid_argument, "this zmoe was built without cairo (libcairo2-dev): no --plot");
}

#endif

}  // namespace zmoe::cli
