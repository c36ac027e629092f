//! Small geometry helpers shared by the overlays.

use ratatui::layout::Rect;

/// A `width` x `height` rectangle centred in `area`, shrunk to fit it, so an
/// overlay never reaches outside the terminal however small it is.
pub(crate) fn centered(area: Rect, width: u16, height: u16) -> Rect {
    let width = width.min(area.width);
    let height = height.min(area.height);
    Rect {
        x: area.x + (area.width - width) / 2,
        y: area.y + (area.height - height) / 2,
        width,
        height,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn centres_and_clamps() {
        let area = Rect::new(10, 5, 20, 10);
        assert_eq!(centered(area, 10, 4), Rect::new(15, 8, 10, 4));
        assert_eq!(centered(area, 50, 50), area);
        assert_eq!(centered(Rect::new(0, 0, 0, 0), 5, 5), Rect::new(0, 0, 0, 0));
    }
}
